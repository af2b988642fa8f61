package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// The committed docs/algorithms.md tables and docs/algorithms/*.svg are what
// the generator writes for the engine as it is now: a change to the engine
// that changes a decision fails here until `go generate ./...` is rerun.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	r := mustCollect(t)
	doc, err := os.ReadFile(filepath.Join("..", "algorithms.md"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := outputs(r, string(doc))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join("..", name))
		if err != nil {
			t.Errorf("docs/%s: %v (run go generate ./... in docs/plots)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("docs/%s is stale: run go generate ./... in docs/plots", name)
		}
	}
}

// The generator is deterministic: two runs give the same bytes.
func TestDeterministic(t *testing.T) {
	a, b := mustCollect(t), mustCollect(t)
	doc := ""
	for name := range a.blocks {
		doc += beginMarker(name) + "\n" + endMarker(name) + "\n"
	}
	fa, err := outputs(a, doc)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := outputs(b, doc)
	if err != nil {
		t.Fatal(err)
	}
	for name := range fa {
		if !bytes.Equal(fa[name], fb[name]) {
			t.Errorf("%s differs between two runs", name)
		}
	}
}

// The numbers the prose of docs/algorithms.md quotes (the tables are checked
// by TestGeneratedFilesAreCurrent; these are the ones written in sentences).
func TestNumbersQuotedInTheGuide(t *testing.T) {
	r := mustCollect(t)
	if r.phase != 2160*time.Millisecond {
		t.Errorf("phase of %s = %v, the guide says 2.16 s", client, r.phase)
	}
	admitted := func(slug string, seg segment) int {
		i := slices.IndexFunc(variants, func(v variant) bool { return v.slug == slug })
		a, _ := tally(r.single[i], seg)
		return a
	}
	for _, c := range []struct {
		slug string
		seg  segment
		want int
	}{
		{"fixed-aligned", burstA, 10},
		{"fixed-aligned", trickle, 4},
		{"fixed-aligned", burstB, 2 * quota}, // the boundary double burst
		{"fixed-phased", trickle, 8},
		{"fixed-phased", burstB, quota},
		{"sliding", trickle, 4},
		{"sliding", burstB, 11},
		{"token-bucket", burstA, quota + 1}, // Burst, plus the token refilled during the burst's first second
		{"token-bucket", trickle, 8},
		{"token-bucket", burstB, 12},
	} {
		if got := admitted(c.slug, c.seg); got != c.want {
			t.Errorf("%s, %s: %d admitted, the guide says %d", c.slug, c.seg, got, c.want)
		}
	}

	// The aligned fixed window's 20 fall within 2 s (29.0 s to 30.9 s).
	if n, at := maxIn(r.single[0], 2*time.Second); n != 2*quota || at != 29*time.Second {
		t.Errorf("fixed-aligned: most admitted in 2 s = %d from %v, the guide says 20 from 29 s", n, at)
	}
	if a, _ := tally(r.ownBoundary, burstB); a != 2*quota {
		t.Errorf("fixed-phased, burst across %s's own boundary: %d admitted, the guide says 20", client, a)
	}

	// Many clients: the aligned fixed window admits everyone's quota in the
	// first second of each window and nothing else; the token bucket
	// admits exactly the refill rate after the first second.
	for s, n := range r.herd[0] {
		want := 0
		if s%10 == 0 {
			want = herdClients * quota
		}
		if n != want {
			t.Errorf("many clients, fixed-aligned, second %d: %d admitted, want %d", s, n, want)
		}
	}
	for s, n := range r.herd[3][1:] {
		if n != herdClients {
			t.Errorf("many clients, token bucket, second %d: %d admitted, want %d", s+1, n, herdClients)
		}
	}
	if lo, hi := slices.Min(r.herd[1][1:]), slices.Max(r.herd[1][1:]); lo != 10 || hi != 26 {
		t.Errorf("many clients, fixed-phased: %d to %d per second after second 0, the guide says 10 to 26", lo, hi)
	}
	if lo, hi := slices.Min(r.herd[2][10:]), slices.Max(r.herd[2][10:]); lo != 15 || hi != 20 {
		t.Errorf("many clients, sliding-phased: %d to %d per second from second 10, the guide says 15 to 20", lo, hi)
	}

	// Retry-After: a client that waits exactly what it is told is admitted
	// every time, on every algorithm.
	for i, v := range variants {
		var headers []int64
		for _, a := range r.obedient[i] {
			if a.retry && !a.allowed {
				t.Errorf("%s: retry at %v, after the Retry-After it was given, was denied", v.slug, a.at)
			}
			if !a.allowed {
				headers = append(headers, a.header)
			}
		}
		switch v.slug {
		case "fixed-aligned", "fixed-phased":
			if !slices.Equal(headers, []int64{8, 7, 8, 7}) {
				t.Errorf("%s: Retry-After values %v, the guide says 8, 7, 8, 7", v.slug, headers)
			}
		case "sliding":
			if len(headers) < 2 || headers[0] != 9 || slices.ContainsFunc(headers[1:], func(h int64) bool { return h != 1 }) {
				t.Errorf("%s: Retry-After values %v, the guide says 9 then 1 s", v.slug, headers)
			}
			var exact []time.Duration
			for _, a := range r.obedient[i] {
				if !a.allowed {
					exact = append(exact, a.retryAfter)
				}
			}
			if len(exact) > 1 && slices.Max(exact[1:]) >= time.Second {
				t.Errorf("%s: exact RetryAfter after the first up to %v, the guide says under 1 s", v.slug, slices.Max(exact[1:]))
			}
		case "token-bucket":
			if slices.ContainsFunc(headers, func(h int64) bool { return h != 1 }) {
				t.Errorf("%s: Retry-After values %v, the guide says always 1 s", v.slug, headers)
			}
		}
	}
}

// A document whose generated sections are missing is an error, not a
// silent no-op.
func TestSpliceNeedsMarkers(t *testing.T) {
	if _, err := splice("# no markers\n", map[string]string{"single": "x\n"}); err == nil {
		t.Fatal("splice accepted a document without markers")
	}
	got, err := splice("a\n"+beginMarker("s")+"\nold\n"+endMarker("s")+"\nb\n", map[string]string{"s": "new\n"})
	if want := "a\n" + beginMarker("s") + "\nnew\n" + endMarker("s") + "\nb\n"; err != nil || got != want {
		t.Fatalf("splice = %q, %v; want %q", got, err, want)
	}
}

// maxIn counts admitted requests in half-open spans [t, t+d) that start at
// an admitted request; denied requests do not count.
func TestMaxIn(t *testing.T) {
	out := []outcome{
		{request: request{at: 0}, allowed: true},
		{request: request{at: time.Second}, allowed: false},
		{request: request{at: 2 * time.Second}, allowed: true},
		{request: request{at: 3 * time.Second}, allowed: true},
		{request: request{at: 4 * time.Second}, allowed: true},
		{request: request{at: 5 * time.Second}, allowed: true},
	}
	if n, at := maxIn(out, 3*time.Second); n != 3 || at != 2*time.Second {
		t.Errorf("maxIn(3 s) = %d from %v, want 3 from 2 s (2, 3, 4 s; 5 s is outside [2 s, 5 s))", n, at)
	}
	if n, at := maxIn(out, 2*time.Second); n != 2 || at != 2*time.Second {
		t.Errorf("maxIn(2 s) = %d from %v, want 2 from 2 s (0 s alone: the 1 s request was denied)", n, at)
	}
}

func mustCollect(t *testing.T) *results {
	t.Helper()
	r, err := collect()
	if err != nil {
		t.Fatal(err)
	}
	return r
}
