package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
	redisstore "github.com/quotagate/quotagate/stores/redis"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislimiter"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// clients are the connections every contender shares: one rueidis client
// with the options the quotagate store recommends (redisstore.ParseURL), and
// one go-redis client with its defaults for the peers built on go-redis.
type clients struct {
	rueidis rueidis.Client
	goredis *goredis.Client
}

// decideFunc makes decision i (the caller picks identity i mod the key
// count); it reports whether the request was admitted.
type decideFunc func(ctx context.Context, i int) (bool, error)

// contender is one limiter under test. setup builds its decision function
// for a quota of limit per minute over ids (identities); the prefix keeps
// its keys apart from the other contenders'.
type contender struct {
	name  string
	setup func(c *clients, prefix string, limit int64, ids []string) (decideFunc, error)
}

// trivialScript is the ceiling: one EVALSHA through rueidis that touches
// nothing and returns 1, on the same keys (so the same routing).
var trivialScript = rueidis.NewLuaScript("return 1")

func contenders() []contender {
	cs := []contender{
		{"trivial EVALSHA (ceiling)", func(c *clients, prefix string, _ int64, ids []string) (decideFunc, error) {
			keys := make([][]string, len(ids))
			for i, id := range ids {
				keys[i] = []string{prefix + "{" + id + "}"}
			}
			return func(ctx context.Context, i int) (bool, error) {
				return true, trivialScript.Exec(ctx, c.rueidis, keys[i%len(keys)], nil).Error()
			}, nil
		}},
		{"rueidislimiter (fixed window)", func(c *clients, prefix string, lim int64, ids []string) (decideFunc, error) {
			l, err := rueidislimiter.NewRateLimiter(rueidislimiter.RateLimiterOption{
				ClientBuilder: func(rueidis.ClientOption) (rueidis.Client, error) { return c.rueidis, nil },
				KeyPrefix:     prefix, Limit: int(lim), Window: time.Minute,
			})
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, i int) (bool, error) {
				r, err := l.Allow(ctx, ids[i%len(ids)])
				return r.Allowed, err
			}, nil
		}},
		{"ulule/limiter (fixed window)", func(c *clients, prefix string, lim int64, ids []string) (decideFunc, error) {
			store, err := ulredis.NewStoreWithOptions(c.goredis, limiter.StoreOptions{Prefix: prefix})
			if err != nil {
				return nil, err
			}
			l := limiter.New(store, limiter.Rate{Period: time.Minute, Limit: lim})
			return func(ctx context.Context, i int) (bool, error) {
				r, err := l.Get(ctx, ids[i%len(ids)])
				return !r.Reached, err
			}, nil
		}},
		{"go-redis/redis_rate (GCRA)", func(c *clients, prefix string, lim int64, ids []string) (decideFunc, error) {
			l := redis_rate.NewLimiter(c.goredis)
			rate := redis_rate.PerMinute(int(lim))
			keys := make([]string, len(ids))
			for i, id := range ids {
				keys[i] = prefix + id
			}
			return func(ctx context.Context, i int) (bool, error) {
				r, err := l.Allow(ctx, keys[i%len(keys)], rate)
				if err != nil {
					return false, err
				}
				return r.Allowed > 0, nil
			}, nil
		}},
	}
	for _, alg := range []limit.Algorithm{limit.SlidingWindow, limit.FixedWindow, limit.TokenBucket} {
		cs = append(cs, contender{"quotagate Store.Take, " + alg.String(), takeContender(alg, false)})
	}
	// The same script on the caller's clock, as rueidislimiter decides: no
	// TIME inside the script (the store's default is the server's clock).
	cs = append(cs, contender{"quotagate Store.Take, fixed-window, caller's clock", takeContender(limit.FixedWindow, true)})
	for _, alg := range []limit.Algorithm{limit.SlidingWindow, limit.FixedWindow, limit.TokenBucket} {
		cs = append(cs, contender{"quotagate Limiter.Check, " + alg.String(), checkContender(alg)})
	}
	return cs
}

// policy is the quotagate policy of a run: limit per minute.
func policy(alg limit.Algorithm, lim int64) limit.Policy {
	return limit.Policy{Algorithm: alg, Limit: lim, Window: time.Minute, FailureMode: limit.FailClosed}
}

// opts are the engine options of every quotagate contender.
func opts(prefix string) []limit.Option {
	return []limit.Option{limit.WithKeyPrefix(prefix)}
}

// storeTimeout is the Store timeout of every quotagate contender: generous,
// so that a loaded machine measures latency, not failures.
const storeTimeout = 5 * time.Second

// takeContender calls Store.Take with the Ops the engine would build (it
// builds them once per identity through a recording store, so the keys,
// phases and numbers are the engine's own); callerClock decides on this
// process's clock (redisstore.WithClock) instead of the server's TIME.
func takeContender(alg limit.Algorithm, callerClock bool) func(c *clients, prefix string, lim int64, ids []string) (decideFunc, error) {
	return func(c *clients, prefix string, lim int64, ids []string) (decideFunc, error) {
		sopts := []redisstore.Option{redisstore.WithTimeout(storeTimeout)}
		if callerClock {
			sopts = append(sopts, redisstore.WithClock(time.Now))
		}
		store, err := redisstore.New(c.rueidis, sopts...)
		if err != nil {
			return nil, err
		}
		rec := &recorder{}
		l, err := limit.New(rec, policy(alg, lim), opts(prefix)...)
		if err != nil {
			return nil, err
		}
		ops := make([]limitstore.Op, len(ids))
		for i, id := range ids {
			l.Consume(context.Background(), id)
			ops[i] = rec.op
			for j := range ops[i].N {
				ops[i].Quotas[j].Key = append([]byte(nil), ops[i].Quotas[j].Key...)
			}
		}
		return func(ctx context.Context, i int) (bool, error) {
			res, err := limittest.Take(ctx, store, &ops[i%len(ops)])
			return res.Allowed, err
		}, nil
	}
}

// recorder is a store that keeps the last Op and admits it.
type recorder struct{ op limitstore.Op }

func (r *recorder) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = r.take(ctx, op)
	return err
}

func (r *recorder) take(_ context.Context, op *limitstore.Op) (limitstore.Result, error) {
	r.op = *op
	return limitstore.Result{Allowed: true, N: op.N}, nil
}

// checkContender runs the whole engine decision for an HTTP request:
// Limiter.Check with a distinct client address per identity.
func checkContender(alg limit.Algorithm) func(c *clients, prefix string, lim int64, ids []string) (decideFunc, error) {
	return func(c *clients, prefix string, lim int64, ids []string) (decideFunc, error) {
		store, err := redisstore.New(c.rueidis, redisstore.WithTimeout(storeTimeout))
		if err != nil {
			return nil, err
		}
		l, err := limit.New(store, policy(alg, lim), opts(prefix)...)
		if err != nil {
			return nil, err
		}
		reqs := make([]limit.Request, len(ids))
		for i := range ids {
			reqs[i] = limit.Request{Route: "/v1/notes/{id}", Method: "GET", Path: "/v1/notes/1",
				Peer: fmt.Sprintf("10.%d.%d.%d:40000", i>>16&255, i>>8&255, i&255)}
		}
		return func(ctx context.Context, i int) (bool, error) {
			d := l.Check(ctx, reqs[i%len(reqs)], limittest.Discard)
			if d.StoreFailed {
				return false, fmt.Errorf("store failed for request %d", i)
			}
			return d.Allowed, nil
		}, nil
	}
}

// identities returns n identity strings.
func identities(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	return ids
}
