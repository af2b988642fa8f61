// Command e2e is the bare server of the end-to-end comparison: the chi
// example's GET /v1/notes/{id} route and handler (examples/chi) on a chi
// router with no limiter, served as the example serves it (the same
// http.Server settings), so that wrk against it and against the example
// (with the RateLimit fields on every response) shows what the limiter
// costs a real server. See run.sh.
//
//	go run ./e2e -addr 127.0.0.1:8091
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8091", "listen address")
	flag.Parse()
	r := chi.NewRouter()
	r.Get("/v1/notes/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// the body examples/internal/app.NoteBody gives
		io.WriteString(w, fmt.Sprintf(`{"id":%q,"text":"a note"}`, chi.URLParam(r, "id")))
	})
	// The example's server (examples/internal/app.Serve): a header read
	// timeout sets a read deadline per request, which the comparison must
	// pay on both sides.
	srv := &http.Server{Addr: *addr, Handler: r, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
