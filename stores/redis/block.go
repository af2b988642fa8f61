package redisstore

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"

	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/redis/rueidis"
)

//go:embed lua/block.lua
var blockBody string

// blockSource is the script of an Op with a block rule
// (limitstore.Op.Block): lua/prelude.lua, then lua/block.lua.
var blockSource = preludeSource + blockBody

// blockScript is created once, as takeScript.
var blockScript = rueidis.NewLuaScript(blockSource)

// blockLen is the length of a stored block record: two little-endian
// 64-bit integers; pendingLen that of the unsettled charges, three (see
// lua/block.lua).
const (
	blockLen   = 16
	pendingLen = 24
)

// blocked reports whether op goes to lua/block.lua: a Take or Peek with a
// block rule, or a Refund that settles a charge the rule keeps unsettled
// (a lease; any other Refund never reads the block).
func blocked(op *limitstore.Op) bool {
	return op.Block.ForMS > 0 && (!op.Refund || op.Block.LeaseMS > 0)
}

// blockNode is blockTake on one master, as Take: a MOVED or ASK answer
// sends it again through the cluster client.
func (b *nodeBackend) blockNode(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	via := b.via()
	res, err := b.s.blockTake(ctx, op, via)
	if via != nil && redirected(err) {
		b.s.refreshSoon()
		return b.s.blockTake(ctx, op, nil)
	}
	return res, err
}

// blockTake decides op, which has a block rule, answers its Peek or
// settles its Refund: one call of lua/block.lua, never batched (the
// flight script knows no block), then limitstore.Op.ApplyBlock on the
// states and the records it read, which must admit exactly when the
// script did. The call goes through via
// when it is not nil (a Cluster master's own connection).
func (s *Store) blockTake(ctx context.Context, op *limitstore.Op, via rueidis.Client) (limitstore.Result, error) {
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
	w := s.batch.waiters.Get().(*waiter)
	w.encode(op, now)
	lease := op.Block.LeaseMS > 0
	nk, want := n+1, 8+replyStateLen*n+blockLen
	if lease {
		nk, want = n+2, want+pendingLen
	}
	keys := make([]string, nk)
	from := 0
	for i := range n {
		keys[i], from = string(w.buf[from:w.ends[i]]), w.ends[i]
	}
	keys[n] = string(op.Block.Key)
	var rule [40]byte
	binary.LittleEndian.PutUint64(rule[0:], uint64(op.Block.ForMS))
	binary.LittleEndian.PutUint64(rule[8:], uint64(max(op.Block.MaxMS, 0)))
	if op.Peek {
		rule[16] = 1
	}
	if lease {
		keys[n+1] = string(op.Block.PendingKey)
		binary.LittleEndian.PutUint64(rule[24:], uint64(op.Block.LeaseMS))
		binary.LittleEndian.PutUint64(rule[32:], uint64(op.Block.Lease))
	}
	args := []string{string(w.buf[from:]), string(rule[:])}
	s.batch.waiters.Put(w) // the strings are copies
	c := r.c
	if via != nil {
		c = via
	}
	str, err := blockScript.Exec(ctx, c, keys, args).ToString()
	if err != nil {
		s.notPrimary(err)
		return limitstore.Result{}, err
	}
	if len(str) != want {
		return limitstore.Result{}, fmt.Errorf("%w: block.lua answered %d bytes, want %d", ErrBadReply, len(str), want)
	}
	now, allowed := le64(str, 0), true
	if now < 0 {
		now, allowed = -now, false
	}
	if now == 0 {
		return limitstore.Result{}, fmt.Errorf("%w: no clock reading", ErrBadReply)
	}
	sts := readStates(op, now, str[8:8+replyStateLen*n])
	rec := str[8+replyStateLen*n:]
	b := limitstore.BlockState{UntilMS: le64(rec, 0), LastMS: le64(rec, 8)}
	if lease {
		b.Lease, b.Pending, b.PendingPrev = le64(rec, blockLen), le64(rec, blockLen+8), le64(rec, blockLen+16)
	}
	res := op.ApplyBlock(&sts, &b, now)
	if !op.Peek && res.Allowed != allowed {
		return limitstore.Result{}, fmt.Errorf("%w: block.lua decided %v, the engine %v on states %v and block %+v at %d", ErrBadReply, allowed, res.Allowed, sts, b, now)
	}
	return res, nil
}
