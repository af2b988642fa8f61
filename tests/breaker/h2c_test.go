package breaker_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2cStatuses opens one h2c (prior knowledge) connection from the loopback
// address from to addr and sends one GET /x per element of extra, each on
// its own stream with the extra fields (lower-case name, value) as
// literals. It returns each stream's :status, or -1 when the server reset
// the stream or closed the connection.
func h2cStatuses(t *testing.T, from, addr string, extra [][2]string) []int {
	t.Helper()
	c := dialFrom(t, from, addr)
	defer c.Close()
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(extra))
	for i, h := range extra {
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "example.com"}, {":path", "/x"}, h} {
			if f[0] == "" {
				continue
			}
			if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
				t.Fatal(err)
			}
		}
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		out[i] = -1
	read:
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return out // connection closed: the rest stay -1
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.MetaHeadersFrame:
				if f.StreamID == id {
					_, _ = fmt.Sscanf(f.PseudoValue("status"), "%d", &out[i])
					if f.StreamEnded() {
						break read
					}
				}
			case *http2.DataFrame:
				if f.StreamID == id && f.StreamEnded() {
					break read
				}
			case *http2.RSTStreamFrame:
				if f.StreamID == id {
					break read
				}
			case *http2.GoAwayFrame:
				return out
			}
		}
	}
	return out
}

// Over h2c the flag's field name is refused (a field name with a space or
// an upper-case letter is malformed in HTTP/2: the stream is reset), and
// look-alike names refund nothing.
func TestForgedLimitedFlagOverH2C(t *testing.T) {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	addr := serve(t, &http.Server{Handler: twoPerHour(t), Protocols: &p})

	forged := [][2]string{{"quotagate limited", "1"}, {"Quotagate limited", "1"}, {"quotagate limited", "1"}}
	if got := h2cStatuses(t, "127.0.0.2", addr, forged); fmt.Sprint(got) != "[-1 -1 -1]" {
		t.Errorf("forged flag over h2c: statuses %v, want every stream refused (-1)", got)
	}
	if got := h2cStatuses(t, "127.0.0.2", addr, [][2]string{{}, {}, {}}); fmt.Sprint(got) != "[204 204 429]" {
		t.Errorf("after the forged streams: %v, want [204 204 429] (nothing was charged or refunded)", got)
	}
	look := [][2]string{{"quotagate-limited", "1"}, {"quotagate_limited", "1"}, {"quotagate%20limited", "1"}, {"x", "1"}}
	if got := h2cStatuses(t, "127.0.0.3", addr, look); fmt.Sprint(got) != "[204 204 429 429]" {
		t.Errorf("look-alike fields over h2c: statuses %v, want [204 204 429 429]", got)
	}
}
