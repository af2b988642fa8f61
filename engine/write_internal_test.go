package limit

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// text renders every number as strconv does: at each length, around each
// power of ten, at the bounds of int64, with room and without (the
// strconv fallback), and the strings it returned before keep their value.
func TestTextRendersNumbersAsStrconv(t *testing.T) {
	ns := []int64{0, 1, 9, 99, 100, math.MaxInt64, math.MinInt64, -1, -9, -10, -99, -100, maxHeaderInt, maxDelayMS}
	for p := int64(10); p < math.MaxInt64/10; p *= 10 {
		ns = append(ns, p-1, p, p+1, p*5+3, -p, -p+1)
	}
	for _, room := range []int{0, 40, 400} {
		tx := text{buf: make([]byte, room)}
		var got []string
		for _, n := range ns {
			if l, want := decimalLen(n), len(strconv.FormatInt(n, 10)); l != want {
				t.Fatalf("decimalLen(%d) = %d, want %d", n, l, want)
			}
			got = append(got, tx.number(n))
		}
		for i, n := range ns {
			if want := strconv.FormatInt(n, 10); got[i] != want {
				t.Fatalf("room %d: number(%d) = %q, want %q", room, n, got[i], want)
			}
		}
	}
}

// newBlock hands out n slots and room for size bytes, whatever the sizes.
func TestNewBlockFitsEverySize(t *testing.T) {
	for n := 1; n <= 40; n++ {
		for size := 0; size <= 300; size++ {
			slots, text := newBlock(n, size)
			if len(slots) != n || len(text) < size {
				t.Fatalf("newBlock(%d, %d): %d slots, text len %d cap %d", n, size, len(slots), len(text), cap(text))
			}
		}
	}
}

// sink is an http.ResponseWriter that keeps the header map only.
type sink struct{ h http.Header }

func (s *sink) Header() http.Header         { return s.h }
func (s *sink) Write(b []byte) (int, error) { return len(b), nil }
func (s *sink) WriteHeader(int)             {}

// BenchmarkFillWriteHTTP measures the response alone, from a decided
// Decision to the fields in a net/http header map (fill, then writeHTTP),
// without the store call that dominates BenchmarkCheckHTTP.
func BenchmarkFillWriteHTTP(b *testing.B) {
	all := HeadersIETF | HeadersTriplet | HeadersLegacy
	for _, tc := range []struct {
		name string
		p    Policy
	}{
		{"allowed/always-ietf", Policy{Disclosure: DiscloseAlways}},
		{"allowed/always-triplet", Policy{Disclosure: DiscloseAlways, HeaderStyle: HeadersTriplet}},
		{"allowed/always-all-styles", Policy{Disclosure: DiscloseAlways, HeaderStyle: all}},
		{"denied/default-disclosure", Policy{Limit: 1}},
		{"denied/on-limit-all-styles", Policy{Limit: 1, Disclosure: DiscloseOnLimit, HeaderStyle: all}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := tc.p
			if p.Limit == 0 {
				p.Limit, p.Window = 1<<28, time.Hour
			}
			l, err := New(&mapStore{now: 1_767_225_610_500, m: map[string]limitstore.State{}}, p)
			if err != nil {
				b.Fatal(err)
			}
			r := Request{Method: "GET", Path: "/v1/notes/1", Peer: "192.0.2.1:4711"}
			var tmpl response
			for range 2 { // the second is limited by a quota of 1
				tmpl = response{}
				rc := r
				l.check(context.Background(), &rc, &tmpl, nil)
			}
			w := &sink{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				resp := response{Decision: tmpl.Decision, set: tmpl.set}
				l.resp.fill(&resp)
				clear(w.h)
				resp.writeHTTP(w)
			}
		})
	}
}

// A RateLimit member rendered into a text with too little room (textLen
// never asks for less than it renders, so only a bug would) comes out
// whole, and the values cut before keep theirs.
func TestTextGrowsMidValue(t *testing.T) {
	r := &response{remaining: 123456789, reset: 3600}
	f := &field{name: nRateLimit, value: `"a long policy name";r=`, kind: valItem}
	for room := range 60 {
		tx := text{buf: make([]byte, room)}
		first := tx.number(4242)
		if got, want := tx.value(r, f), `"a long policy name";r=123456789;t=3600`; got != want || first != "4242" {
			t.Fatalf("room %d: %q and %q, want %q and 4242", room, got, first, want)
		}
	}
}

// headerWriterOf is a ResponseWriter over a net/http header map: writeTo
// through it takes the general path (writeFields and its merge rules).
type headerWriterOf struct{ http.Header }

func (headerWriterOf) Send(int, []byte) {}

// The fields of an allowed response of an IETF policy written into an
// empty net/http header map (writeIETF) are those the general path writes,
// value for value, for short and long policy names and numbers of every
// length; the values and their slots share one allocation, and an Add to
// either field afterwards never writes into the other's.
func TestIETFFieldsAsTheGeneralPath(t *testing.T) {
	for _, name := range []string{"", "api", "a-policy-name-of-forty-bytes-for-the-tes"} {
		l, err := New(&mapStore{now: 1_767_225_610_500, m: map[string]limitstore.State{}}, Policy{Name: name, Limit: 1 << 28, Window: time.Hour, Disclosure: DiscloseAlways})
		if err != nil {
			t.Fatal(err)
		}
		var tmpl response
		r := Request{Method: "GET", Path: "/", Peer: "192.0.2.1:4711"}
		l.check(context.Background(), &r, &tmpl, nil)
		for _, remaining := range []int64{0, 7, 99, 100, 12345, maxHeaderInt} {
			for _, reset := range []int64{0, 1, 3600, maxDelayMS / 1000} {
				resp := tmpl
				resp.remaining, resp.reset = remaining, reset
				fast := &sink{h: http.Header{}}
				resp.writeHTTP(fast)
				general := headerWriterOf{http.Header{}}
				resp.writeTo(general)
				if len(fast.h) != 2 || len(fast.h) != len(general.Header) {
					t.Fatalf("name %q: %v, want %v", name, fast.h, general.Header)
				}
				for k, vs := range general.Header {
					if got := fast.h[k]; len(got) != 1 || got[0] != vs[0] || cap(got) != 1 {
						t.Fatalf("name %q, %d, %d: %s = %q (cap %d), want %q", name, remaining, reset, k, got, cap(got), vs)
					}
				}
				fast.h.Add(hRateLimitPolicy, "x")
				if fast.h.Get(hRateLimit) != general.Header.Get(hRateLimit) {
					t.Fatalf("an Add to RateLimit-Policy changed RateLimit: %q", fast.h.Get(hRateLimit))
				}
			}
		}
	}
	l, _ := New(&mapStore{now: 1_767_225_610_500, m: map[string]limitstore.State{}}, Policy{Limit: 1 << 28, Window: time.Hour, Disclosure: DiscloseAlways})
	var tmpl response
	r := Request{Method: "GET", Path: "/", Peer: "192.0.2.1:4711"}
	l.check(context.Background(), &r, &tmpl, nil)
	w := &sink{h: http.Header{}}
	if n := testing.AllocsPerRun(100, func() {
		clear(w.h)
		resp := tmpl
		resp.writeHTTP(w)
	}); n != 1 {
		t.Fatalf("%v allocations per response, want 1", n)
	}
}
