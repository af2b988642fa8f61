package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
)

var _ limitstore.Resetter = (*Store)(nil)

// Reset implements limitstore.Resetter: one DEL of every key, behind the
// Store's guard as Take (WithoutGuard: ctx as it is). DEL of several keys
// is atomic in Redis, and the keys of one identity share a hash tag, so it
// is one command on one Cluster slot: a concurrent Take runs wholly before
// or wholly after it. Deleting absent keys is no error. The errors are
// Take's.
func (s *Store) Reset(ctx context.Context, keys [][]byte) error {
	if s.guard == nil {
		return prefixed((*backend)(s).Reset(ctx, keys))
	}
	return prefixed(s.guard.Reset(ctx, keys))
}

// Reset is the Store's Reset without its protections.
func (b *backend) Reset(ctx context.Context, keys [][]byte) error {
	s := (*Store)(b)
	r := s.client.Load()
	if r == nil || s.closed.Load() {
		return s.unusable()
	}
	if len(keys) == 0 {
		return nil
	}
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = string(k)
	}
	err := r.c.Do(ctx, r.c.B().Del().Key(ks...).Build()).Error()
	if err != nil {
		s.notPrimary(err)
	}
	return err
}

// peek answers a Peek (limitstore.Op.Peek): lua/peek.lua reads the clock
// and the states, writing nothing, and limitstore.Op.Apply decides on them
// as the memory store would. Never batched: a Peek is rare, and its own call
// keeps the batch script a writer of Takes only.
func (s *Store) peek(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	r := s.client.Load()
	if r == nil || s.closed.Load() {
		return limitstore.Result{}, s.unusable()
	}
	n := op.N
	if n < 1 || n > limitstore.MaxQuotas {
		return limitstore.Result{}, fmt.Errorf("redisstore: Op with %d quotas (want 1 to %d)", n, limitstore.MaxQuotas)
	}
	var now int64
	if s.clock != nil {
		t := s.clock()
		if now = t.UnixMilli(); now <= 0 || now > maxClockMS {
			return limitstore.Result{}, fmt.Errorf("redisstore: WithClock's clock read %s, outside (the Unix epoch, 2^52 ms]", t.UTC().Format(time.RFC3339Nano))
		}
	}
	keys := make([]string, n)
	for i := range n {
		keys[i] = string(op.Quotas[i].Key)
	}
	resp := peekScript.Exec(ctx, r.c, keys, []string{strconv.FormatInt(now, 10)})
	vals, err := resp.ToArray()
	if err != nil {
		s.notPrimary(err)
		return limitstore.Result{}, err
	}
	if len(vals) != n+1 {
		return limitstore.Result{}, fmt.Errorf("%w: peek.lua answered %d values, want %d", ErrBadReply, len(vals), n+1)
	}
	if now, err = vals[0].AsInt64(); err != nil || now <= 0 {
		return limitstore.Result{}, fmt.Errorf("%w: peek.lua's clock reading: %v", ErrBadReply, vals[0])
	}
	states := make([]byte, 0, stateLen*n)
	for i := range n {
		v, err := vals[i+1].ToString()
		switch {
		case err != nil:
			return limitstore.Result{}, fmt.Errorf("%w: peek.lua's value %d: %v", ErrBadReply, i+1, err)
		case len(v) == stateLen:
			states = append(states, v...)
		default:
			states = append(states, make([]byte, stateLen)...) // no state
		}
	}
	sts := readStates(op, now, string(states))
	return op.Apply(&sts, now), nil
}
