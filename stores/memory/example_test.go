package memstore_test

import (
	"context"
	"fmt"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// The memory store is the embedded default: one per process, shared by
// every Limiter of the process (a Limiter per policy, each with its own
// records in it).
func ExampleNew() {
	store, err := memstore.New(memstore.WithMaxKeys(100_000)) // bounded memory; the default is DefaultMaxKeys
	if err != nil {
		panic(err)
	}
	// 2 searches per minute per user, refilled one every 30 s.
	search := limittest.MustNew(store, limit.Policy{Name: "search", Algorithm: limit.TokenBucket, Limit: 2, Window: time.Minute})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		d, _ := search.Consume(ctx, "user-42")
		fmt.Println(d.Allowed, d.Remaining)
	}
	d, _ := search.Consume(ctx, "user-7") // another user, another allowance
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true 1
	// true 0
	// false 0
	// true 1
}
