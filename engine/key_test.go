package limit_test

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// DESIGN (Identity): "First match wins: 1. Policy KeyFunc ... 3. The socket
// peer address." KeyFunc identities and address identities were written
// into one namespace ("r:<identity>", or "h:" + SHA-256 of the same text
// with WithHashKeys), so a KeyFunc value that spelled an address WAS that
// address's allowance. With the common "API key if present, else the client
// address" KeyFunc, anyone could send X-Api-Key: 203.0.113.7 and drain the
// quota of the anonymous client at 203.0.113.7, which had never sent a
// request.
func TestKeyFuncIdentityNeverCollidesWithAddressIdentity(t *testing.T) {
	for _, hash := range []bool{false, true} {
		store := limittest.NewStore(nil)
		l, err := limit.New(store, limit.Policy{Limit: 1, KeyFunc: func(r limit.Request) (string, error) {
			if v := r.Header.Values("X-Api-Key"); len(v) > 0 {
				return v[0], nil
			}
			return "", nil // no key: fall through to the client address
		}}, limit.WithHashKeys(hash))
		if err != nil {
			t.Fatal(err)
		}
		attacker := limit.Request{Peer: "198.51.100.1:1", Header: http.Header{"X-Api-Key": {"203.0.113.7"}}}
		victim := limit.Request{Peer: "203.0.113.7:4444", Header: http.Header{}}

		if d := check(l, context.Background(), attacker).Decision; !d.Allowed || d.KeySource != limit.KeySourceKeyFunc {
			t.Fatalf("hash=%v: attacker's request: %+v", hash, d)
		}
		d := check(l, context.Background(), victim).Decision
		if d.KeySource != limit.KeySourceSocket {
			t.Fatalf("hash=%v: victim keyed by %s", hash, d.KeySource)
		}
		if !d.Allowed {
			t.Errorf("hash=%v: the first request ever of the client at 203.0.113.7 was denied: the KeyFunc identity "+
				"\"203.0.113.7\" and the socket address share one store key %q", hash, store.Keys())
		}
	}
}

func TestStoreKeyLayout(t *testing.T) {
	store := storeAt(0)
	l := limittest.MustNew(store, limit.Policy{Scope: limit.PerRoute, Algorithm: limit.FixedWindow, Limit: 5}, limit.WithKeyPrefix("app"))
	check(l, context.Background(), limit.Request{Route: "/v1/{a}/{b}", Peer: "[::ffff:192.0.2.1]:40003"})
	check(l, context.Background(), limit.Request{Route: "/v1/{a}/{b}", Peer: "192.0.2.1:40001"})
	if len(store.Keys()) != 1 {
		t.Fatalf("mapped and plain IPv4 made %d keys, want 1 identity", len(store.Keys()))
	}
	key := store.Keys()[0]
	// app:{xxxxxxxx}:/v1/{a}/{b} 5p60f:p60f:r:192.0.2.1
	if !strings.HasPrefix(key, "app:{") || key[13] != '}' || !strings.HasSuffix(key, ":/v1/{a}/{b} 5p60f:p60f:r:192.0.2.1") {
		t.Fatalf("key %q does not follow <prefix>:{<tag>}:<bucket>:<state signature>:r:<identity>", key)
	}
	hashed := limittest.MustNew(store, limit.Policy{}, limit.WithHashKeys(true))
	check(hashed, context.Background(), limit.Request{Peer: "192.0.2.1:1"})
	long := limittest.MustNew(store, limit.Policy{KeyFunc: func(limit.Request) (string, error) { return strings.Repeat("k", 200), nil }})
	check(long, context.Background(), limit.Request{})
	for _, k := range store.Keys()[1:] { // the first is the raw key above
		if !strings.Contains(k, ":h:") || strings.Contains(k, "192.0.2.1") || strings.Contains(k, "kkkk") {
			t.Fatalf("key %q: want a hashed identity", k)
		}
	}
}

// The store keys README.md and docs/DESIGN.md show are the keys the engine
// writes: a change of the layout or of the tag's hash breaks this test
// rather than leaving the documents' examples wrong.
func TestDocumentedStoreKeys(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skipf("SKIPPED: no zoneinfo for America/New_York: %v", err)
	}
	apiKey := func(limit.Request) (string, error) { return "pro-1", nil }
	for _, c := range []struct {
		doc    string
		policy limit.Policy
		opts   []limit.Option
		route  string
		want   []string
	}{
		{"../README.md", limit.Policy{}, []limit.Option{limit.WithKeyPrefix("orders")}, "",
			[]string{"orders:{52b6f3d6}:100p60:p60:r:192.0.2.1"}},
		{"../README.md", limit.Policy{Scope: limit.PerRoute, Algorithm: limit.TokenBucket, Limit: 1, Window: time.Second, Burst: 2},
			[]limit.Option{limit.WithKeyPrefix("orders")}, "/v1/a",
			[]string{"orders:{fba00170}:/v1/a 1p1gb2:p1g:r:192.0.2.1"}},
		{"../README.md", limit.Policy{Name: "export", Limit: 5, Window: time.Minute, KeyFunc: apiKey,
			Plans: map[string][]limit.Rate{"pro": {{Limit: 20, Window: time.Minute}}},
			Plan:  func(limit.Request) (string, error) { return "pro", nil }},
			[]limit.Option{limit.WithKeyPrefix("orders")}, "",
			[]string{"orders:{6f0077d4}:export:pro=p60:r:k=pro-1"}},
		{"../docs/DESIGN.md", limit.Policy{Name: "login", Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute}, nil, "",
			[]string{"quotagate:{7e4e4151}:login:p60f:r:192.0.2.1"}},
		{"../docs/DESIGN.md", limit.Policy{Name: "daily", Algorithm: limit.FixedWindow,
			Quotas:  []limit.Rate{{Limit: 20, Per: limit.Day, Location: ny}},
			KeyFunc: func(limit.Request) (string, error) { return "key-1", nil }}, nil, "",
			[]string{"quotagate:{a3a0db2e}:daily:pday@America/New_York:r:k=key-1"}},
	} {
		store := limittest.NewStore(nil)
		l := limittest.MustNew(store, c.policy, c.opts...)
		check(l, context.Background(), limit.Request{Route: c.route, Peer: "192.0.2.1:40001"})
		if got := store.Keys(); !slices.Equal(got, c.want) {
			t.Errorf("policy %+v wrote keys %q, want %q (and fix %s)", c.policy, got, c.want, c.doc)
		}
		raw, err := os.ReadFile(c.doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range c.want {
			if !strings.Contains(string(raw), k) {
				t.Errorf("%s does not show the key %q", c.doc, k)
			}
		}
	}
}
