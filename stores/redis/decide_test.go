package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/redis/rueidis"
)

// TestDecideRejectsBadReplies feeds replies of the wrong shape, produced
// by a real script call, to the reply decoder (one string: the clock
// reading, negated for a denial, then the states read, 8-byte little-endian); and a reply whose decision
// limitstore.Op.Apply does not reproduce from the states in it. It needs a real
// Redis (QUOTAGATE_REDIS_URL, which `make test` sets): the decoder is
// unexported, and this module's tests use no test server library, so that
// an application's module graph carries none (README.md, "Module
// graphs"). The rest of the store's tests, on miniredis and on
// real servers, are in the tests module (tests/redisstore).
func TestDecideRejectsBadReplies(t *testing.T) {
	url := os.Getenv("QUOTAGATE_REDIS_URL")
	if url == "" {
		t.Skip("!!! SKIPPED: QUOTAGATE_REDIS_URL is not set, so the reply decoder was NOT tested " +
			"(run `make test` with redis-server on PATH, or `scripts/redis.sh up DIR && . DIR/env`)")
	}
	opt, err := ParseURL(url)
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", url, err)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	eval := func(src string) rueidis.RedisResult {
		return c.Do(ctx, c.B().Eval().Script(src).Numkeys(0).Build())
	}
	op := limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{
		{Key: []byte("k"), Algorithm: limit.FixedWindow, Limit: 5, WindowMS: 1000},
	}}
	const now = 1_764_457_000_123
	idx := int64(now / 1000)
	// reply is a script returning the reply of a decision at now (negated:
	// denied) that read a fixed-window state of count 5 in window idx,
	// expiring at exp.
	reply := func(now int64, state ...int64) rueidis.RedisResult {
		b := binary.LittleEndian.AppendUint64(nil, uint64(now))
		for _, v := range state {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		return c.Do(ctx, c.B().Eval().Script("return ARGV[1]").Numkeys(0).Arg(string(b)).Build())
	}
	full := func(exp int64) []int64 { return []int64{idx, 5, 0, exp, exp} }
	for _, src := range []string{"return {1, 2}", "return {1, 2, 3, 4, 5}", "return 5", "return 'five'"} {
		if _, err := decide(&op, eval(src)); err == nil {
			t.Errorf("%s: no error", src)
		}
	}
	for _, r := range [][]int64{{0}, {1, 2}, {1, 2, 3, 4, 5, 6, 7, 8}} {
		if _, err := decide(&op, reply(r[0], r[1:]...)); !errors.Is(err, ErrBadReply) {
			t.Errorf("reply %v: %v, want ErrBadReply", r, err)
		}
	}
	if _, err := decide(&op, eval("return 'five'")); !errors.Is(err, ErrBadReply) {
		t.Errorf("a reply of the wrong length: %v, want ErrBadReply", err)
	}
	if _, err := decide(&op, eval("return redis.error_reply('boom')")); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("script error: %v, want it passed on", err)
	}
	// A full window the script claims it admitted: the engine disagrees.
	if _, err := decide(&op, reply(now, full(now+1000)...)); !errors.Is(err, ErrBadReply) {
		t.Errorf("disagreeing decision: %v, want ErrBadReply", err)
	}
	got, err := decide(&op, reply(-now, full(now+1000)...))
	if err != nil || got.Allowed || got.NowMS != now || got.Quotas[0].Remaining != 0 || got.Quotas[0].RetryAfterMS != 1000-now%1000 {
		t.Errorf("got %+v, %v; want a denial at %d with Retry-After %d", got, err, now, 1000-now%1000)
	}
	// The same state expired (or absurdly far ahead): no state, admitted.
	for _, exp := range []int64{now, now + 1<<37 + 1} {
		got, err = decide(&op, reply(now, full(exp)...))
		if err != nil || !got.Allowed || got.Quotas[0].Remaining != 4 {
			t.Errorf("expiry %d: got %+v, %v; want a fresh window admitted", exp, got, err)
		}
	}
	// No value read: the clock reading alone.
	if got, err = decide(&op, reply(now)); err != nil || !got.Allowed || got.Quotas[0].Remaining != 4 {
		t.Errorf("no state: got %+v, %v; want a fresh window admitted", got, err)
	}
	// A value with its epoch (a key a Reset found live): 48 bytes, the
	// epoch last; the epoch dies with the state.
	withEpoch := func(count, exp, epoch int64) []int64 { return []int64{idx, count, 0, exp, exp, epoch} }
	if got, err = decide(&op, reply(now, withEpoch(1, now+1000, 3)...)); err != nil || !got.Allowed || got.Quotas[0].Remaining != 3 || got.Quotas[0].Epoch != 3 {
		t.Errorf("a state of epoch 3: got %+v, %v; want admitted, Remaining 3, epoch 3", got, err)
	}
	if got, err = decide(&op, reply(now, withEpoch(1, now, 3)...)); err != nil || !got.Allowed || got.Quotas[0].Remaining != 4 || got.Quotas[0].Epoch != 0 {
		t.Errorf("an expired state of epoch 3: got %+v, %v; want a fresh window of epoch 0", got, err)
	}
}

// TestSplitBatchRejectsBadBatchReplies: a batch reply (a kind byte per Op,
// the server's clock reading, then per Op its states or its error) is cut
// into the members' answers: an admitted or denied Op gets the clock it
// sent (or the server's), negated when denied, and the states it read; an
// Op's error comes back as its error; a reply of the wrong shape is
// ErrBadReply.
func TestSplitBatchRejectsBadBatchReplies(t *testing.T) {
	member := func(now int64) *waiter {
		w := &waiter{}
		op := limitstore.Op{N: 1, Cost: 1}
		op.Quotas[0] = limitstore.Quota{Key: []byte("k"), Algorithm: limit.FixedWindow, Limit: 5, WindowMS: 1000}
		w.encode(&op, now)
		return w
	}
	members := []*waiter{member(1000), member(0), member(0)}
	st := strings.Repeat("s", replyStateLen)
	good := "\x02\x01\x01\x02\x02" + string(binary.LittleEndian.AppendUint64(nil, 5000)) + st + st + "\x04\x00boom"
	rs, parts, errs := make([]int64, 3), make([]string, 3), make([]error, 3)
	if err := splitBatch(good, members, rs, parts, errs); err != nil {
		t.Fatal(err)
	}
	if rs[0] != 1000 || parts[0] != st || errs[0] != nil {
		t.Errorf("admitted on its own clock: %d %q %v, want 1000, the states", rs[0], parts[0], errs[0])
	}
	if rs[1] != -5000 || parts[1] != st || errs[1] != nil {
		t.Errorf("denied on the server's clock: %d %q %v, want -5000, the states", rs[1], parts[1], errs[1])
	}
	if err := errs[2]; err == nil || errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), "boom") {
		t.Errorf("the Op's error: %v, want \"boom\"", err)
	}
	for _, bad := range []string{
		"",                   // nothing
		good[:10],            // no clock reading
		good[:11+stateLen+5], // a part cut short
		good + "x",           // bytes after the last Op
		good[:len(good)-1],   // an error cut short
		"\x03" + good[1:],    // an unknown kind
	} {
		if err := splitBatch(bad, members, rs, parts, errs); !errors.Is(err, ErrBadReply) {
			t.Errorf("splitBatch(%q): %v, want ErrBadReply", bad, err)
		}
	}
}
