package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/redis/rueidis"
)

var _ limitstore.Resetter = (*Store)(nil)

var (
	_ limitstore.Resetter = (*backend)(nil)
	_ limitstore.Resetter = (*nodeBackend)(nil)
)

// Reset implements limitstore.Resetter: one call of lua/reset.lua on every
// key, behind the Store's guard as Take (on a Cluster, the guard of the
// keys' master; WithoutGuard: ctx as it is). A script runs atomically in
// Redis, and the keys of one identity share a hash tag, so it is one call
// on one Cluster slot: a concurrent Take runs wholly before or wholly
// after it. Each live state becomes the empty state of the next epoch,
// keeping its expiry and its key's deadline; every other key is deleted.
// Absent keys are no error. Once the script has succeeded the Reset is
// announced to the other processes (resets.go). The errors are Take's.
func (s *Store) Reset(ctx context.Context, keys [][]byte) error {
	if s.guard == nil {
		return prefixed((*backend)(s).Reset(ctx, keys))
	}
	g := s.guard
	if cr := s.cluster.Load(); cr != nil && len(keys) > 0 {
		var op limitstore.Op // the route of the keys: the first one's slot
		op.N, op.Quotas[0].Key = 1, keys[0]
		if n := cr.route(s, &op); n != nil {
			g = n.guard
		}
	}
	return prefixed(g.Reset(ctx, keys))
}

// Reset is the Store's Reset without its protections.
func (b *backend) Reset(ctx context.Context, keys [][]byte) error {
	return (*Store)(b).reset(ctx, keys, nil)
}

// Reset is Reset on one master, behind its guard; a MOVED or ASK answer
// (the slot moved) sends it again through the cluster client, as Take.
func (b *nodeBackend) Reset(ctx context.Context, keys [][]byte) error {
	via := b.via()
	err := b.s.reset(ctx, keys, via)
	if via != nil && redirected(err) {
		b.s.refreshSoon()
		return b.s.reset(ctx, keys, nil)
	}
	return err
}

// peek is a Peek on one master, as Take.
func (b *nodeBackend) peek(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	via := b.via()
	res, err := b.s.peek(ctx, op, via)
	if via != nil && redirected(err) {
		b.s.refreshSoon()
		return b.s.peek(ctx, op, nil)
	}
	return res, err
}

// via is the cluster client's connection to the node, or nil (none yet:
// the cluster client routes).
func (b *nodeBackend) via() rueidis.Client {
	if cb := b.n.client.Load(); cb != nil {
		return cb.c
	}
	return nil
}

// redirected reports a MOVED or ASK answer: the slot is served elsewhere,
// and the command did not run.
func redirected(err error) bool {
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		_, moved := re.IsMoved()
		_, ask := re.IsAsk()
		return moved || ask
	}
	return false
}

// refreshSoon asks a Cluster Store for a new reading of the slots.
func (s *Store) refreshSoon() {
	if cr := s.cluster.Load(); cr != nil {
		cr.refreshSoon(s)
	}
}

// callerNow is WithClock's reading in Unix ms for a script that reads the
// clock itself (peek.lua, reset.lua, block.lua): 0 without WithClock (the
// script reads the server's TIME), or an error for a reading outside
// what the scripts hold.
func (s *Store) callerNow() (int64, error) {
	if s.clock == nil {
		return 0, nil
	}
	t := s.clock()
	now := t.UnixMilli()
	if now <= 0 || now > maxClockMS {
		return 0, fmt.Errorf("redisstore: WithClock's clock read %s, outside (the Unix epoch, 2^52 ms]", t.UTC().Format(time.RFC3339Nano))
	}
	return now, nil
}

// reset is one call of lua/reset.lua on keys, through via when it is not
// nil, at the Store's clock (the server's TIME without WithClock).
func (s *Store) reset(ctx context.Context, keys [][]byte, via rueidis.Client) error {
	r := s.client.Load()
	if r == nil || s.closed.Load() {
		return s.unusable()
	}
	if len(keys) == 0 {
		return nil
	}
	now, err := s.callerNow()
	if err != nil {
		return err
	}
	c := r.c
	if via != nil {
		c = via
	}
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = string(k)
	}
	if err := resetScript.Exec(ctx, c, ks, []string{strconv.FormatInt(now, 10)}).Error(); err != nil {
		s.notPrimary(err)
		return err
	}
	s.announce(ctx, c, keys) // resets.go
	return nil
}

// peek answers a Peek (limitstore.Op.Peek): lua/peek.lua reads the clock
// and the states, writing nothing, and limitstore.Op.Apply decides on them
// as the memory store would. Never batched: a Peek is rare, and its own call
// keeps the batch script a writer of Takes only.
//
// The call goes through via when it is not nil (a Cluster master's own
// connection).
func (s *Store) peek(ctx context.Context, op *limitstore.Op, via rueidis.Client) (limitstore.Result, error) {
	r := s.client.Load()
	if r == nil || s.closed.Load() {
		return limitstore.Result{}, s.unusable()
	}
	n := op.N
	if n < 1 || n > limitstore.MaxQuotas {
		return limitstore.Result{}, fmt.Errorf("redisstore: Op with %d quotas (want 1 to %d)", n, limitstore.MaxQuotas)
	}
	now, err := s.callerNow()
	if err != nil {
		return limitstore.Result{}, err
	}
	keys := make([]string, n)
	for i := range n {
		keys[i] = string(op.Quotas[i].Key)
	}
	c := r.c
	if via != nil {
		c = via
	}
	resp := peekScript.Exec(ctx, c, keys, []string{strconv.FormatInt(now, 10)})
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
	states := make([]byte, 0, replyStateLen*n)
	for i := range n {
		v, err := vals[i+1].ToString()
		switch {
		case err != nil:
			return limitstore.Result{}, fmt.Errorf("%w: peek.lua's value %d: %v", ErrBadReply, i+1, err)
		case len(v) == epochLen:
			states = append(states, v...)
		case len(v) == stateLen:
			states = append(append(states, v...), make([]byte, epochLen-stateLen)...) // epoch 0
		default:
			states = append(states, make([]byte, replyStateLen)...) // no state
		}
	}
	sts := readStates(op, now, string(states))
	return op.Apply(&sts, now), nil
}
