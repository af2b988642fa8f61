package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
	redisstore "github.com/quotagate/quotagate/stores/redis"
)

// An application's -redis flag: the Store starts even when Redis is down
// (requests then follow the policy's FailureMode) and connects as soon as it
// can. Not run: it needs a server.
func ExampleNewFromURL() {
	store, err := redisstore.NewFromURL("redis://127.0.0.1:6379")
	if err != nil {
		log.Fatal(err) // a malformed URL or options, never "Redis is down"
	}
	defer store.Close()
	if err := store.Ping(context.Background()); err != nil {
		log.Printf("redis not reachable yet (%v): failing open until it is", err)
	}
	// The key prefix is the service's name: services on one Redis keep
	// their own allowances (limit.New refuses the default prefix on it).
	l := limittest.MustNew(store, limit.Policy{Limit: 100, Window: time.Minute}, limit.WithKeyPrefix("orders"))
	d, _ := l.Consume(context.Background(), "user-42")
	fmt.Println(d.Allowed, d.Outcome)
}

// ParseURL checks a URL and builds the rueidis options NewFromURL uses,
// without connecting: a Cluster given by its seed nodes, a Sentinel set, and
// a parameter rueidis would silently ignore, refused.
func ExampleParseURL() {
	for _, u := range []string{
		"redis://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000",
		"redis://10.0.0.5:26379?addr=10.0.0.6:26379&master_set=mymaster",
		"redis://10.0.0.1:6379?pool_size=10",
	} {
		opt, err := redisstore.ParseURL(u)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(opt.InitAddress, opt.Sentinel.MasterSet, opt.Dialer.Timeout)
	}
	// Output:
	// [10.0.0.1:7000 10.0.0.2:7000 10.0.0.3:7000]  1s
	// [10.0.0.5:26379 10.0.0.6:26379] mymaster 1s
	// error: redisstore: invalid option: Redis URL: unknown query parameter "pool_size"; valid parameters: addr, client_cache, client_name, db, dial_timeout, master_set, max_retries, protocol, skip_verify, write_timeout
}
