package guard_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/quotagate/quotagate/engine/limittest"
)

// BenchmarkGuardedConsume is one allowed decision through the guard over
// an in-process store, with the caller's cancellation watched (the path
// that releases a caller that goes away) and beside it unwatched (the path
// before it), for a caller with a background context and one with a
// cancellable context (every HTTP request's), over a store that never
// waits (memory) and one that asks for its context's Done channel on every
// call, as a network client does while it waits (asks-done), in one run:
//
//	go test -run '^$' -bench GuardedConsume -benchmem ./guard
func BenchmarkGuardedConsume(b *testing.B) {
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = "client-" + strconv.Itoa(i)
	}
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, st := range []struct {
		name string
		new  func() limitstore.Store
	}{
		{"memory", func() limitstore.Store { return limittest.NewStore(nil) }},
		{"asks-done", func() limitstore.Store { return askDone{limittest.NewStore(nil)} }},
	} {
		for _, path := range []struct {
			name string
			opts []guard.Option
		}{{"unwatched", []guard.Option{guard.WithoutWatch()}}, {"watched", nil}} {
			for _, c := range []struct {
				name string
				ctx  context.Context
			}{{"background", context.Background()}, {"cancellable", cancellable}} {
				b.Run(st.name+"/"+path.name+"/"+c.name, func(b *testing.B) {
					opts := append([]guard.Option{guard.WithoutDenyCache()}, path.opts...)
					l := mustNew(b, guarded(b, st.new(), opts...), limit.Policy{Limit: 1 << 28, Window: time.Hour})
					for _, id := range ids {
						l.Consume(c.ctx, id)
					}
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						if d, err := l.Consume(c.ctx, ids[i%len(ids)]); err != nil || !d.Allowed {
							b.Fatal(d, err)
						}
						i++
					}
				})
			}
		}
	}
}

// askDone looks at its context's Done channel before each call, as a
// network client does when it waits for a reply.
type askDone struct{ limitstore.Store }

func (s askDone) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = s.take(ctx, op)
	return err
}

func (s askDone) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	select {
	case <-ctx.Done():
		return limitstore.Result{}, ctx.Err()
	default:
	}
	return limittest.Take(ctx, s.Store, op)
}
