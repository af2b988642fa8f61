package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	limit "github.com/quotagate/quotagate/engine"
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
	l := limit.MustNew(store, limit.Policy{Limit: 100, Window: time.Minute})
	d, _ := l.Consume(context.Background(), "user-42")
	fmt.Println(d.Allowed, d.Outcome)
}
