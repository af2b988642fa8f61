package redisstore

import (
	"context"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/redis/rueidis"
)

// This file keeps the concurrency slots of limit.Concurrency policies
// (limitstore.Leaser): one script call to take or renew (lua/acquire.lua),
// one to give back (lua/release.lua), on the identity's one sorted set of
// lease deadlines. Each call runs under the Store's timeout (WithTimeout)
// but not behind its circuit breaker or deny cache: the deny cache holds
// rate denials (a full identity frees a slot at any moment), and a breaker
// opened by the rate scripts' failures answers these calls too, as the
// engine's FailureMode does on their errors.

//go:embed lua/acquire.lua
var acquireSource string

//go:embed lua/release.lua
var releaseSource string

var (
	acquireScript = rueidis.NewLuaScript(acquireSource)
	releaseScript = rueidis.NewLuaScript(releaseSource)
)

var _ limitstore.Leaser = (*Store)(nil)

// Acquire implements limitstore.Leaser: one acquire.lua call, at the
// server's TIME (or WithClock's reading). Errors are as for Take.
func (s *Store) Acquire(ctx context.Context, op *limitstore.LeaseOp) (limitstore.LeaseResult, error) {
	c, now, err := s.leaseCall()
	if err != nil {
		return limitstore.LeaseResult{}, prefixed(err)
	}
	ctx, cancel := s.leaseCtx(ctx)
	defer cancel()
	var tok [2 * limitstore.TokenSize]byte
	hex.Encode(tok[:], op.Token[:])
	resp := acquireScript.Exec(ctx, c, []string{string(op.Key)}, []string{string(tok[:]),
		strconv.FormatInt(op.Cost, 10), strconv.FormatInt(op.Limit, 10), strconv.FormatInt(op.LeaseMS, 10), strconv.FormatInt(now, 10)})
	v, err := resp.AsIntSlice()
	if err != nil {
		s.notPrimary(err)
		return limitstore.LeaseResult{}, prefixed(err)
	}
	if len(v) != 3 {
		return limitstore.LeaseResult{}, prefixed(fmt.Errorf("%w: acquire.lua answered %d integers, want 3", ErrBadReply, len(v)))
	}
	return limitstore.LeaseResult{Allowed: v[0] == 1, Held: v[1], NowMS: v[2]}, nil
}

// Release implements limitstore.Leaser: one release.lua call.
func (s *Store) Release(ctx context.Context, op *limitstore.LeaseOp) (bool, error) {
	c, now, err := s.leaseCall()
	if err != nil {
		return false, prefixed(err)
	}
	ctx, cancel := s.leaseCtx(ctx)
	defer cancel()
	var tok [2 * limitstore.TokenSize]byte
	hex.Encode(tok[:], op.Token[:])
	resp := releaseScript.Exec(ctx, c, []string{string(op.Key)}, []string{string(tok[:]), strconv.FormatInt(op.Cost, 10), strconv.FormatInt(now, 10)})
	n, err := resp.AsInt64()
	if err != nil {
		s.notPrimary(err)
		return false, prefixed(err)
	}
	return n == 1, nil
}

// leaseCall returns the client and the clock reading to send (0: the
// server's TIME), or why the Store cannot call.
func (s *Store) leaseCall() (rueidis.Client, int64, error) {
	r := s.client.Load()
	if r == nil || s.closed.Load() {
		return nil, 0, s.unusable()
	}
	var now int64
	if s.clock != nil {
		if now = s.clock().UnixMilli(); now <= 0 || now > maxClockMS {
			return nil, 0, fmt.Errorf("redisstore: WithClock's clock read %d ms after the Unix epoch, outside the range the scripts hold for", now)
		}
	}
	return r.c, now, nil
}

// leaseCtx bounds a lease call by the Store's timeout, unless ctx ends
// sooner.
func (s *Store) leaseCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	d := s.leaseTimeout
	if d == 0 {
		d = guard.DefaultTimeout
	}
	if by, ok := ctx.Deadline(); ok && time.Until(by) < d {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
