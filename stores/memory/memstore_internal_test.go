package memstore

import (
	"context"
	"github.com/quotagate/quotagate/engine/limittest"
	"strconv"
	"testing"
	"time"
	"unsafe"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
)

func TestDecisionsOfAShardNeverGoBack(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	// A goroutine that read the clock at 100, then waited for the locks
	// while another decided at 200 on shard 3, decides at 200.
	s.shards[3].last = 200
	if got := s.at(100, []int{1, 3}); got != 200 {
		t.Fatalf("at(100) after a decision at 200 = %d, want 200", got)
	}
	if s.shards[1].last != 200 {
		t.Fatalf("shard 1 last = %d, want 200: the other locked shard moves too", s.shards[1].last)
	}
	if got := s.at(300, []int{3}); got != 300 || s.shards[3].last != 300 {
		t.Fatalf("at(300) = %d (last %d), want 300", got, s.shards[3].last)
	}
	// A clock set with WithClock is read under the locks, as it is: a fake
	// clock that steps back is seen stepping back.
	now := time.UnixMilli(1_000_000)
	f, err := New(WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	f.shards[0].last = 2_000_000
	if got := f.at(f.early(), []int{0}); got != 1_000_000 {
		t.Fatalf("WithClock: at = %d, want the clock's 1000000", got)
	}
}

func TestWhatEveryDecisionWritesSharesOneLine(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	line := func(p unsafe.Pointer) uintptr { return uintptr(p) / cacheLine }
	for i := range s.shards {
		sh := &s.shards[i]
		if line(unsafe.Pointer(&sh.mu)) != line(unsafe.Pointer(&sh.ticks)) {
			t.Fatalf("shard %d: mu at %p and ticks at %p are on two cache lines", i, &sh.mu, &sh.ticks)
		}
		if i > 0 && line(unsafe.Pointer(&sh.mu)) == line(unsafe.Pointer(&s.shards[i-1].epochs)) {
			t.Fatalf("shard %d: its lock shares a line with the shard before", i)
		}
	}
	if sz := unsafe.Sizeof(s.shards[0]); sz%cacheLine != 0 {
		t.Fatalf("a shard is %d bytes: not whole cache lines", sz)
	}
}

// A store whose every key is live pays no sweep: after 20 000 new keys of
// a one-hour window, every shard's due is still ahead, so no decision's
// sweep step looks at a slot.
func TestAStoreOfLiveKeysDoesNotSweep(t *testing.T) {
	now := time.UnixMilli(1_767_225_600_000)
	s, err := New(WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	op := limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{{Algorithm: limit.SlidingWindow, Limit: 100, WindowMS: 3_600_000}}}
	for i := range 20_000 {
		op.Quotas[0].Key = []byte("k:" + strconv.Itoa(i))
		if _, err := limittest.Take(context.Background(), s, &op); err != nil {
			t.Fatal(err)
		}
	}
	for i := range s.shards {
		sh := &s.shards[i]
		if due := sh.due.Load(); due <= now.UnixMilli() || sh.sweep != 0 {
			t.Fatalf("shard %d: due %d, now %d, cursor %d: the sweep ran over live entries", i, due, now.UnixMilli(), sh.sweep)
		}
	}
}
