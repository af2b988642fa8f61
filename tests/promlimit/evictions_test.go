package promlimit_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// The memory store's evictions, as counters: a store of 384 entries flooded
// by 2 000 one-off clients (every shard meets its cap of 6) evicts 1 616 live
// entries; once every window has passed, further traffic reclaims the other
// 384 as expired.
func TestEvictionsCollectorCountsTheMemoryStore(t *testing.T) {
	clock := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	store, err := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxKeys(384))
	if err != nil {
		t.Fatal(err)
	}
	c := promlimit.NewEvictionsCollector("memory", store)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	l := limittest.MustNew(store, limit.Policy{Limit: 5, Window: time.Minute})
	ctx := context.Background()
	for i := range 2000 {
		if _, err := l.Consume(ctx, "client-"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	want := func(expired, live int) string {
		return `# HELP quotagate_store_evictions_total Entries a rate-limit store removed to bound its memory, by store and reason: expired (past their time to live) or live (evicted before it to make room; that identity starts afresh).
# TYPE quotagate_store_evictions_total counter
quotagate_store_evictions_total{reason="expired",store="memory"} ` + strconv.Itoa(expired) + `
quotagate_store_evictions_total{reason="live",store="memory"} ` + strconv.Itoa(live) + "\n"
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(0, 1616)), promlimit.StoreEvictionsTotal); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3 * time.Minute)
	// every 16th decision of one identity sweeps another shard, the 64 in
	// turn, each table whole (one 8-slot bucket at this cap): 1 024
	// decisions sweep them all
	for range 16 * 64 {
		if _, err := l.Consume(ctx, "regular"); err != nil {
			t.Fatal(err)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(384, 1616)), promlimit.StoreEvictionsTotal); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}
