package limittest

import (
	"net/http"
	"net/textproto"

	limit "github.com/quotagate/quotagate/engine"
)

// Writer is a limit.ResponseWriter that records what the engine writes: the
// header fields in Header, and the status and body of Send. Reset empties it
// for the next request while keeping its memory, so that a warm Writer
// allocates nothing (allocation guards reuse one). It is not safe for
// concurrent use.
type Writer struct {
	Header http.Header // the header fields written (Set, Add)
	Status int         // the status of Send; 0 when Send was not called
	Body   []byte      // a copy of the body of Send
	Sends  int         // calls of Send
}

var _ limit.ResponseWriter = (*Writer)(nil)

// NewWriter returns an empty Writer.
func NewWriter() *Writer { return &Writer{Header: http.Header{}} }

// Get implements limit.ResponseWriter.
func (w *Writer) Get(name string) string {
	if v := w.Header[textproto.CanonicalMIMEHeaderKey(name)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set implements limit.ResponseWriter.
func (w *Writer) Set(name, value string) {
	name = textproto.CanonicalMIMEHeaderKey(name)
	w.Header[name] = append(w.Header[name][:0], value)
}

// Add implements limit.ResponseWriter.
func (w *Writer) Add(name, value string) {
	name = textproto.CanonicalMIMEHeaderKey(name)
	w.Header[name] = append(w.Header[name], value)
}

// Send implements limit.ResponseWriter.
func (w *Writer) Send(status int, body []byte) {
	w.Status, w.Body, w.Sends = status, append(w.Body[:0], body...), w.Sends+1
}

// Reset empties w, keeping its memory. Header keys with no values remain,
// which Get and http.Header.Values read as absent.
func (w *Writer) Reset() {
	for k, v := range w.Header {
		w.Header[k] = v[:0]
	}
	w.Status, w.Body, w.Sends = 0, w.Body[:0], 0
}

// Discard is a limit.ResponseWriter that keeps nothing: benchmarks use it to
// measure the engine alone (what the engine decides and formats), without a
// framework's response behind it.
var Discard limit.ResponseWriter = discard{}

type discard struct{}

func (discard) Get(string) string  { return "" }
func (discard) Set(string, string) {}
func (discard) Add(string, string) {}
func (discard) Send(int, []byte)   {}
