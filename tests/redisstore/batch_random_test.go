package redisstore_test

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"github.com/quotagate/quotagate/engine/limittest"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	. "github.com/quotagate/quotagate/stores/redis"
	"github.com/redis/rueidis"
)

// Randomized flights: TestBatchRandomFlightsAsOneByOne.

// batchSeed adds a seed to TestBatchRandomFlightsAsOneByOne's fixed list
// (go test -run BatchRandom ./redisstore/ -batchseed=N), as does the
// environment variable envBatchSeed.
var batchSeed = flag.String("batchseed", "", "one more seed for TestBatchRandomFlightsAsOneByOne (also $"+envBatchSeed+")")

const envBatchSeed = "QUOTAGATE_BATCH_SEED"

// The bounds of a flight in stores/redis/batch.go (maxBatchOps,
// maxBatchKeys: key uses, each Op's counted; maxBatchBytes: each Op's keys
// and argument): the bound flights sit at them and one over.
const (
	flightOps   = 64
	flightKeys  = 255
	flightBytes = 64 << 10
)

// TestBatchRandomFlightsAsOneByOne: seeded random flights, each compared
// with the same Ops sent one by one (in the flight's order) on a mirrored
// key set: every Result field, every error (an Op on a key of another type
// fails WRONGTYPE, alone), the stored bytes of every key the flight
// touched (and its PTTL on miniredis), and at the end the same keys on
// both sides. The flights mix the three algorithms, policies of several
// limits on one key, Ops of 1 to MaxQuotas quotas (now and then the same
// key twice in one Op), refunds, costs up to the largest capacity plus
// one, shared and distinct arguments, a few hot keys or many, keys holding
// a hash, a list, a short string or a dead 40-byte value, binary key
// bytes; flights at each bound (64 Ops; 255 keys, every one distinct, so
// that KEYS indexes reach 255; 64 KiB) and one over it, where the Op that
// does not fit must go in a call of its own (checked on the calls; ARGV
// has at most 65 entries: an argument per Op and the heads); and 3 to 5
// flights queued at once on one Store, so that its runners reuse their
// flights' buffers and index maps (each on keys of its own, but for a key
// of another type and a key only ever denied, which every one of them
// has: a stale index shows there).
//
// On the caller's clock every Op has its own instant (the same ms, small
// steps, steps back within and beyond the 1 s of skew, window boundaries,
// hours). On miniredis the server's clock is frozen with SetTime and moved
// between flights, so the comparison is exact there too; on a real server
// the clock runs, so its windows have now in their middle and its buckets
// refill slowly, and the instant's fields are left out (the window index,
// whether a quota retries and whether it writes are kept), and of the
// stored values the length and a window's state.
func TestBatchRandomFlightsAsOneByOne(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	fixed := len(seeds)
	for _, v := range []string{*batchSeed, os.Getenv(envBatchSeed)} {
		if v == "" {
			continue
		}
		s, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			t.Fatalf("seed %q: %v", v, err)
		}
		seeds = append(seeds, s)
	}
	// rfKeysBound is the 64 Ops bound too.
	bounds := []rfShape{rfKeysBound, rfOpsOver, rfKeysOver, rfBytesBound, rfBytesOver}
	forOneServer(t, func(t *testing.T, be *backend) {
		client := be.newClient(t)
		for c, callerClock := range []bool{true, false} {
			for i, seed := range seeds {
				// On a real server, and for an added seed: flights on
				// one Store, random flights, every bound. On miniredis (a
				// new Lua interpreter per script call: an Op one by one
				// costs milliseconds under -race) a fixed seed has
				// flights on one Store, a random flight and a 64 KiB
				// bound, and three of the six runs one of the 64-Op
				// bounds each (255 keys, 65 Ops, 256 keys).
				shapes := append([]rfShape{rfReuse, rfRandom, rfRandom, rfRandom}, bounds...)
				if !be.real && i < fixed {
					j := c*fixed + i
					shapes = []rfShape{rfReuse, rfRandom, bounds[3+j%2]}
					if j%2 == 0 && j/2 < 3 {
						shapes = append(shapes, bounds[j/2])
					}
				}
				t.Run(fmt.Sprintf("caller-clock=%v/seed=%d", callerClock, seed), func(t *testing.T) {
					t.Cleanup(func() {
						if t.Failed() {
							t.Logf("seed %d: rerun with  go test -race -run 'TestBatchRandomFlightsAsOneByOne' ./redisstore/ -batchseed=%d", seed, seed)
						}
					})
					newRandomFlights(t, be, client, callerClock, seed).run(shapes)
				})
			}
		}
	})
}

// randomFlights is one seed's run: a pool of keys, the clock, the Store
// that sends the same Ops one by one.
type randomFlights struct {
	t           *testing.T
	be          *backend
	client      rueidis.Client
	rng         *rand.Rand
	callerClock bool
	fake        bool         // the instants are the test's: the caller's clock, or miniredis's TIME
	now         atomic.Int64 // the caller's clock, or the server's (miniredis: set; real: about)
	t0          int64        // the real server's clock at the start
	opts        []Option
	alone       *Store
	prefix      string
	pa, pb      string // the flights' key set and the one-by-one set
	pool        []*rfKey
	made        int // keys made
	flights     int
	groups      int // the flights of rfReuse
	stats       struct{ ops, denied, refunds, wrongs, maxKeys, maxArgs int }
}

// rfKey is a key of the pool: its name after the set's prefix, its
// algorithm, the policies an Op on it may use (a policy whose limit
// changed: same window and phase), and what the test stored under it.
type rfKey struct {
	id   string
	alg  limit.Algorithm
	pols []limitstore.Quota
	kind string // "": the store's; "hash", "list": another type; "short", "dead": a string the store did not write
}

func (k *rfKey) otherType() bool { return k.kind == "hash" || k.kind == "list" }

// rfOp is one Op of a flight: a on the flights' keys, b on the one-by-one
// set's, decided at now (the caller's clock).
type rfOp struct {
	a, b limitstore.Op
	keys [limitstore.MaxQuotas]*rfKey
	now  int64
}

func newRandomFlights(t *testing.T, be *backend, client rueidis.Client, callerClock bool, seed uint64) *randomFlights {
	salt := uint64(0x9e3779b97f4a7c15)
	if callerClock {
		salt++
	}
	r := &randomFlights{t: t, be: be, client: client, rng: rand.New(rand.NewPCG(seed, salt)),
		callerClock: callerClock, fake: callerClock || be.mini != nil}
	r.prefix = testPrefix(t)
	r.pa, r.pb = r.prefix+":a", r.prefix+":b"
	t.Cleanup(func() { deleteKeys(t, client, r.prefix) })
	r.t0 = time.Now().UnixMilli()
	r.now.Store(r.t0)
	if callerClock {
		r.opts = append(r.opts, WithClock(func() time.Time { return time.UnixMilli(r.now.Load()) }))
	}
	if !callerClock && be.mini != nil {
		be.mini.SetTime(time.UnixMilli(r.t0))
		t.Cleanup(func() { be.mini.SetTime(time.Time{}) })
	}
	var err error
	if r.alone, err = New(client, append(r.opts, WithoutGuard())...); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *randomFlights) run(shapes []rfShape) {
	t := r.t
	// The scripts are loaded before any call is held (a first EVALSHA
	// answers NOSCRIPT).
	warm := oneQuota(r.prefix+":{warm}:f", limitstore.Quota{Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}, 1)
	if _, err := limittest.Take(ctxT(t), r.alone, &warm); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"hash", "list", "short", "dead"} {
		r.pool = append(r.pool, r.newKey(kind))
	}
	for range 26 {
		kind := ""
		if r.rng.IntN(16) == 0 {
			kind = []string{"hash", "list", "short", "dead"}[r.rng.IntN(4)]
		}
		r.pool = append(r.pool, r.newKey(kind))
	}
	r.rng.Shuffle(len(shapes), func(i, j int) { shapes[i], shapes[j] = shapes[j], shapes[i] })
	for _, sh := range shapes {
		r.flight(sh)
		if t.Failed() {
			return
		}
	}
	// The same keys on both sides; the other types untouched.
	a, b := scanKeys(t, r.client, r.pa), scanKeys(t, r.client, r.pb)
	for i := range a {
		a[i] = strings.TrimPrefix(a[i], r.pa)
	}
	for i := range b {
		b[i] = strings.TrimPrefix(b[i], r.pb)
	}
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		t.Errorf("the flights left %d keys, the Ops one by one %d (or other names)", len(a), len(b))
	}
	ctx := ctxT(t)
	for _, k := range r.pool {
		if !k.otherType() {
			continue
		}
		for _, p := range []string{r.pa, r.pb} {
			if typ, err := r.client.Do(ctx, r.client.B().Type().Key(p+k.id).Build()).ToString(); err != nil || typ != k.kind {
				t.Errorf("%q is a %q (%v) after the flights, want the %s", p+k.id, typ, err, k.kind)
			}
		}
	}
	s := r.stats
	t.Logf("%d flights, %d Ops: %d denied, %d refunds, %d WRONGTYPE; up to %d KEYS and %d ARGV in a call",
		r.flights, s.ops, s.denied, s.refunds, s.wrongs, s.maxKeys, s.maxArgs)
}

// pick returns one of xs.
func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

// newKey makes a key of the pool (kind: what the test stores under it on
// both sides) with a random algorithm and one or two policies that suit
// the backend and the clock (policy).
func (r *randomFlights) newKey(kind string) *rfKey {
	r.made++
	alg := pick(r.rng, algorithms...)
	letter := map[limit.Algorithm]string{limit.SlidingWindow: "s", limit.FixedWindow: "f", limit.TokenBucket: "g"}[alg]
	k := &rfKey{id: fmt.Sprintf(":{t%d}:%s:%d", r.made%5, letter, r.made), alg: alg, kind: kind}
	if r.rng.IntN(4) == 0 {
		k.id += "\x00\xff\x80{}*?\r\n" // binary-safe end to end
	}
	q := r.policy(alg)
	k.pols = []limitstore.Quota{q}
	if r.rng.IntN(5) == 0 { // the policy's limit (and burst) changed
		v := r.policy(alg)
		v.WindowMS, v.PhaseMS = q.WindowMS, q.PhaseMS
		k.pols = append(k.pols, v)
	}
	if kind == "" {
		return k
	}
	ctx := ctxT(r.t)
	for _, p := range []string{r.pa, r.pb} {
		key := p + k.id
		var cmd rueidis.Completed
		switch kind {
		case "hash":
			cmd = r.client.B().Hset().Key(key).FieldValue().FieldValue("f", "v").Build()
		case "list":
			cmd = r.client.B().Rpush().Key(key).Element("x").Build()
		case "short":
			cmd = r.client.B().Set().Key(key).Value("junk").Build()
		case "dead": // a state that died long ago (expiry 1), key deadline 1
			v := make([]byte, 40)
			v[0], v[8], v[24], v[32] = 7, 2, 1, 1
			cmd = r.client.B().Set().Key(key).Value(string(v)).Build()
		}
		if err := r.client.Do(ctx, cmd).Error(); err != nil {
			r.t.Fatal(err)
		}
	}
	return k
}

// policy is a random quota of alg. On miniredis (TTLs count down only when
// told) anything: windows of 1 ms to a day. A real server expires keys on
// its own clock, and an Op sent one by one later than its flight must find
// what the flight's Op found: on the caller's clock every key lives at
// least 60 s (sliding windows of a minute or more, buckets refilling in a
// minute or more, fixed windows of a day or two with the clock's whole
// range, t0 +- 6 h, in their middle); on the server's clock windows of an
// hour or a day with now in their middle, and buckets gaining a token in
// 10 minutes or more, so that the seconds between a flight and its Ops one
// by one change no decision.
func (r *randomFlights) policy(alg limit.Algorithm) limitstore.Quota {
	q := limitstore.Quota{Algorithm: alg}
	rng := r.rng
	mid := func() int64 { return ((r.t0-q.WindowMS/2)%q.WindowMS + q.WindowMS) % q.WindowMS }
	switch {
	case r.be.mini != nil:
		if alg == limit.TokenBucket {
			q.Limit, q.WindowMS = pick[int64](rng, 1, 3, 5, 10), pick[int64](rng, 1, 1000, 60_000, 86_400_000)
		} else {
			q.Limit, q.WindowMS = pick[int64](rng, 1, 2, 3, 5, 10), pick[int64](rng, 1, 7, 1000, 60_000, 86_400_000)
			q.PhaseMS = rng.Int64N(q.WindowMS)
		}
	case r.callerClock:
		switch alg {
		case limit.SlidingWindow:
			q.Limit, q.WindowMS = pick[int64](rng, 1, 2, 3, 5, 10), pick[int64](rng, 60_000, 600_000, 3_600_000)
			q.PhaseMS = rng.Int64N(q.WindowMS)
		case limit.FixedWindow:
			q.Limit, q.WindowMS = pick[int64](rng, 1, 2, 3, 5, 10), pick[int64](rng, 86_400_000, 172_800_000)
			q.PhaseMS = mid()
		default:
			q.Limit, q.WindowMS = 1+rng.Int64N(6), pick[int64](rng, 600_000, 3_600_000)
		}
	default:
		q.Limit = pick[int64](rng, 1, 2, 3, 5, 6)
		q.WindowMS = pick[int64](rng, 3_600_000, 86_400_000)
		if alg != limit.TokenBucket {
			q.PhaseMS = mid()
		}
	}
	if alg == limit.TokenBucket {
		q.Burst = 1 + rng.Int64N(q.Limit+3)
	}
	return q
}

// step moves the test's clock: the same ms, a few ms, back (within the
// 1 s of skew and beyond), about a window, up to an hour; on a real server
// within t0 +- 6 h (policy).
func (r *randomFlights) step() {
	now := r.now.Load()
	switch x := r.rng.IntN(20); {
	case x < 8:
	case x < 14:
		now += 1 + r.rng.Int64N(30)
	case x < 16:
		now -= 1 + r.rng.Int64N(1500)
	case x < 18:
		k := r.pool[r.rng.IntN(len(r.pool))]
		now += k.pols[0].WindowMS + r.rng.Int64N(3) - 1
	default:
		now += r.rng.Int64N(3_600_000)
	}
	if r.be.mini == nil {
		now = min(max(now, r.t0-6*3_600_000), r.t0+6*3_600_000)
	}
	r.now.Store(now)
}

// refundWindow is a Quota.Window for a refund of cost at now: mostly the
// charge's own (the window now is in, the TAT of a charge just made), else
// another one. On a real server's clock a bucket's is long past or far
// enough ahead that the seconds between the flight and the Ops one by one
// do not change what it gives back.
func (r *randomFlights) refundWindow(q *limitstore.Quota, cost, now int64) int64 {
	rng := r.rng
	if q.Algorithm == limit.TokenBucket {
		charge := (min(cost, q.Burst)*q.WindowMS + q.Limit - 1) / q.Limit
		if !r.fake {
			return pick(rng, now-3_600_000, now+charge+3_600_000)
		}
		return pick(rng, now+charge, now+rng.Int64N(2*charge+2), now-rng.Int64N(q.WindowMS+1), now)
	}
	d := now - q.PhaseMS
	idx := (d - ((d%q.WindowMS)+q.WindowMS)%q.WindowMS) / q.WindowMS
	return idx + pick[int64](rng, 0, 0, 0, -1, 1, -3)
}

// op makes an Op of minN to maxN quotas on keys drawn by next (dups: now
// and then the same key twice), at the caller's clock's next instant.
func (r *randomFlights) op(next func() *rfKey, minN, maxN int, dups bool) rfOp {
	rng := r.rng
	if r.callerClock {
		r.step()
	}
	o := rfOp{now: r.now.Load()}
	n := minN + rng.IntN(maxN-minN+1)
	o.a.N = n
	capMin, capMax := int64(1<<62), int64(0)
	for i := range n {
		k := next()
		if dups && i > 0 && rng.IntN(20) == 0 {
			k = o.keys[rng.IntN(i)]
		}
		o.keys[i] = k
		q := k.pols[rng.IntN(len(k.pols))]
		o.a.Quotas[i] = q
		c := q.Limit
		if q.Algorithm == limit.TokenBucket {
			c = q.Burst
		}
		capMin, capMax = min(capMin, c), max(capMax, c)
	}
	switch x := rng.IntN(10); {
	case x == 0:
		o.a.Cost = 0
	case x < 6:
		o.a.Cost = 1
	case x < 8:
		o.a.Cost = 1 + rng.Int64N(capMin+1)
	case x == 8:
		o.a.Cost = capMin + 1
	default:
		o.a.Cost = rng.Int64N(capMax + 2)
	}
	if rng.IntN(6) == 0 {
		o.a.Refund = true
		for i := range n {
			q := &o.a.Quotas[i]
			q.Window = r.refundWindow(q, o.a.Cost, o.now)
		}
	}
	r.setKeys(&o)
	return o
}

// setKeys sets o's keys on both sides from its rfKeys.
func (r *randomFlights) setKeys(o *rfOp) {
	o.b = o.a
	for i := range o.a.N {
		o.a.Quotas[i].Key = []byte(r.pa + o.keys[i].id)
		o.b.Quotas[i].Key = []byte(r.pb + o.keys[i].id)
	}
}

// hot is a random handful of the pool (1 to 40 keys): the flight's keys,
// so that a key often comes back in it.
func (r *randomFlights) hot() func() *rfKey {
	n := 1 + r.rng.IntN(min(len(r.pool), 40))
	var ks []*rfKey
	for _, i := range r.rng.Perm(len(r.pool))[:n] {
		ks = append(ks, r.pool[i])
	}
	return func() *rfKey {
		if r.rng.IntN(10) == 0 { // a new key, in the pool from now on
			k := r.newKey("")
			r.pool = append(r.pool, k)
			ks = append(ks, k)
			return k
		}
		return ks[r.rng.IntN(len(ks))]
	}
}

// fresh returns a new key each call, added to the pool.
func (r *randomFlights) fresh() *rfKey {
	k := r.newKey("")
	r.pool = append(r.pool, k)
	return k
}

// distinct returns a function handing out n distinct keys: the pool's,
// shuffled, then new ones.
func (r *randomFlights) distinct(n int) func() *rfKey {
	ks := slices.Clone(r.pool)
	r.rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
	for len(ks) < n {
		ks = append(ks, r.fresh())
	}
	return func() *rfKey {
		k := ks[0]
		ks = ks[1:]
		return k
	}
}

// rfShape is what a flight tests.
type rfShape int

const (
	rfRandom     rfShape = iota // 1 to 31 random Ops on hot keys
	rfOpsOver                   // 65 Ops: the last in a call of its own
	rfBytesBound                // 64 KiB of keys and arguments
	rfBytesOver                 // 64 KiB + 1: the last Op in a call of its own
	rfKeysBound                 // 255 keys, all distinct, and 64 Ops
	rfKeysOver                  // 256 keys: the last Op in a call of its own
	rfReuse                     // 3 to 5 flights of about 64 KiB on one Store, each on keys of its own
)

func (s rfShape) String() string {
	return [...]string{"random", "65 Ops", "64 KiB", "64 KiB + 1 byte", "255 keys", "256 keys", "flights on one Store"}[s]
}

// opBytes is what an Op counts against flightBytes: its keys and its
// argument (the Store's waiter.encode).
func opBytes(op *limitstore.Op) int {
	n := 16
	for i := range op.N {
		n += len(op.Quotas[i].Key) + 32
		if op.Refund {
			n += 16 // the charge's window and epoch
		}
	}
	return n
}

// flightsOf is how the Store cuts a queue of Ops into flights (batch.go's
// fill): the number of Ops in each.
func flightsOf(ops []*limitstore.Op) []int {
	var out []int
	k, size, nk := 0, 0, 0
	for _, op := range ops {
		if k == flightOps || (k > 0 && (size+opBytes(op) > flightBytes || nk+op.N > flightKeys)) {
			out = append(out, k)
			k, size, nk = 0, 0, 0
		}
		k, size, nk = k+1, size+opBytes(op), nk+op.N
	}
	return append(out, k)
}

// ops makes a flight's Ops for shape, behind the queued filler.
func (r *randomFlights) ops(shape rfShape, filler *limitstore.Op) []rfOp {
	var ops []rfOp
	switch shape {
	case rfRandom:
		next := r.hot()
		for range 1 + r.rng.IntN(31) {
			ops = append(ops, r.op(next, 1, limitstore.MaxQuotas, true))
		}
	case rfOpsOver: // at most 3 quotas: 64 * 3 < 255 keys
		next := r.hot()
		for range flightOps - 1 {
			ops = append(ops, r.op(next, 1, 3, true))
		}
		// On keys of its own: its call may run first.
		ops = append(ops, r.op(r.fresh, 1, 3, false))
	case rfKeysBound, rfKeysOver: // the filler's 3 (4) keys and 63 Ops of 4: 64 Ops
		next := r.distinct((flightOps - 1) * limitstore.MaxQuotas)
		for range flightOps - 1 {
			ops = append(ops, r.op(next, limitstore.MaxQuotas, limitstore.MaxQuotas, false))
		}
	case rfBytesBound, rfBytesOver:
		next := r.hot()
		for range 1 + r.rng.IntN(8) {
			ops = append(ops, r.op(next, 1, limitstore.MaxQuotas, true))
		}
		// An Op on a key of its own, out of the pool, whose name fills the
		// flight to exactly 64 KiB (and one byte more with the last Op).
		pad := r.newKey("")
		o := r.op(func() *rfKey { return pad }, 1, 1, false)
		at := r.rng.IntN(len(ops) + 1)
		ops = slices.Insert(ops, at, o)
		if shape == rfBytesOver {
			ops = append(ops, r.op(r.fresh, 1, 2, false))
		}
		size, target := opBytes(filler), flightBytes
		for i := range ops {
			size += opBytes(&ops[i].a)
		}
		if shape == rfBytesOver {
			target++
		}
		pad.id += strings.Repeat("p", target-size)
		r.setKeys(&ops[at])
	case rfReuse:
		// Flights queued back to back, each cut by the 64 KiB bound (its
		// first Op's key is long), each on keys of its own: their calls
		// go out 2 or 3 at once, in any order, and the runners reuse
		// their flights' buffers and maps. But for two keys every flight
		// has, whose Ops come out the same in any order: the pool's hash
		// (WRONGTYPE, alone and beside a key of the flight's) and a key
		// only ever asked more than its capacity (denied, never written).
		size := opBytes(filler)
		r.groups = 3 + r.rng.IntN(3)
		never := r.fresh()
		hash := r.pool[slices.IndexFunc(r.pool, func(k *rfKey) bool { return k.kind == "hash" })]
		for range r.groups {
			hot := []*rfKey{r.fresh(), r.fresh(), r.fresh()}
			next := func() *rfKey { return hot[r.rng.IntN(len(hot))] }
			pad := r.newKey("")
			at := len(ops)
			ops = append(ops, r.op(func() *rfKey { return pad }, 1, 1, false))
			for range 1 + r.rng.IntN(4) {
				ops = append(ops, r.op(next, 1, limitstore.MaxQuotas, true))
			}
			o := r.op(func() *rfKey { return never }, 1, 1, false)
			q := &o.a.Quotas[0]
			o.a.Cost, o.a.Refund = max(q.Limit, q.Burst)+1, false
			r.setKeys(&o)
			ops = slices.Insert(ops, at+1+r.rng.IntN(len(ops)-at), o)
			shared := []*rfKey{hot[0], hash}
			ops = slices.Insert(ops, at+1+r.rng.IntN(len(ops)-at), r.op(func() *rfKey {
				k := shared[0]
				shared = shared[1:]
				return k
			}, 2, 2, false))
			ops = slices.Insert(ops, at+1+r.rng.IntN(len(ops)-at), r.op(func() *rfKey { return hash }, 1, 1, false))
			for i := at; i < len(ops); i++ {
				size += opBytes(&ops[i].a)
			}
			pad.id += strings.Repeat("p", flightBytes-r.rng.IntN(200)-size)
			r.setKeys(&ops[at])
			size = 0
		}
	}
	return ops
}

// flight runs one flight of shape: a fresh Store on a gated client, its
// calls held by fillers (the one that queued is the flight's first Op),
// the Ops queued in order, released; then the same Ops one by one on the
// other key set, compared.
func (r *randomFlights) flight(shape rfShape) {
	t := r.t
	r.flights++
	fp := fmt.Sprintf("%s:fill%d", r.prefix, r.flights)
	fillerN := 1
	switch shape {
	case rfKeysBound:
		fillerN = 3
	case rfKeysOver:
		fillerN = 4
	}
	switch {
	case !r.fake:
		r.now.Store(time.Now().UnixMilli())
	case !r.callerClock: // miniredis's TIME, frozen for the flight and its Ops one by one
		r.step()
		r.be.mini.SetTime(time.UnixMilli(r.now.Load()))
	}
	g := newGated(r.client)
	s, err := New(g, append(r.opts, WithoutGuard())...)
	if err != nil {
		t.Fatal(err)
	}
	var filler limitstore.Op
	fillerNow := r.now.Load() // the fillers' clock
	run := startGatedWith(t, s, g, func(i int) limitstore.Op {
		filler = limitstore.Op{Cost: 1, N: fillerN}
		for j := range fillerN {
			filler.Quotas[j] = limitstore.Quota{Key: []byte(fmt.Sprintf("%s:{f%d}:%d", fp, i, j)),
				Algorithm: limit.FixedWindow, Limit: 10, WindowMS: 3_600_000}
		}
		return filler
	})
	held := run.held
	ops := r.ops(shape, &filler)
	queue := []*limitstore.Op{&filler}
	for i := range ops {
		queue = append(queue, &ops[i].a)
	}
	want := flightsOf(queue)
	switch shape {
	case rfOpsOver, rfBytesOver, rfKeysOver:
		if len(want) != 2 || want[1] != 1 {
			t.Fatalf("%s: the Ops would go in calls of %v Ops; want the last alone", shape, want)
		}
	case rfReuse:
		if len(want) != r.groups {
			t.Fatalf("%s: the Ops would go in calls of %v Ops; want %d", shape, want, r.groups)
		}
	default:
		if len(want) != 1 {
			t.Fatalf("%s: the Ops would go in calls of %v Ops; want one", shape, want)
		}
	}
	chs := make([]chan outcome, len(ops))
	for i := range ops {
		r.now.Store(ops[i].now) // the caller's clock (else unused)
		var queued bool
		// No deadline: the Ops wait for a call to return (or, behind a
		// whole flight, the flush timer), in this order.
		if chs[i], queued = run.start(context.Background(), &ops[i].a); !queued {
			t.Fatalf("%s: Op %d reached Redis while the calls were held; want it queued", shape, i)
		}
	}
	run.releaseAll()
	got := make([]outcome, len(ops))
	for i, ch := range chs {
		got[i] = run.wait(ch)
	}
	// The first call's distinct arguments and keys (ARGV and KEYS indexes).
	args, keys := map[string]bool{argOf(&filler, fillerNow, r.callerClock): true}, map[string]bool{}
	for i, op := range queue[:want[0]] {
		if i > 0 {
			args[argOf(op, ops[i-1].now, r.callerClock)] = true
		}
		for j := range op.N {
			keys[string(op.Quotas[j].Key)] = true
		}
	}
	r.stats.maxArgs, r.stats.maxKeys = max(r.stats.maxArgs, len(args)+1), max(r.stats.maxKeys, len(keys))
	calls := g.batchCalls()[held:]
	slices.Sort(calls)
	slices.Sort(want)
	if !slices.Equal(calls, want) {
		t.Fatalf("%s: script calls by Op count %v after the %d held; want %v", shape, calls, held, want)
	}

	ctx := ctxT(t)
	var touched []*rfKey
	seen := map[*rfKey]bool{}
	for i := range ops {
		o := &ops[i]
		r.now.Store(o.now)
		res, err := limittest.Take(ctx, r.alone, &o.b)
		if msg := r.differ(o, got[i], outcome{res, err}); msg != "" {
			t.Errorf("flight %d (%s), Op %d of %d %s: %s", r.flights, shape, i, len(ops), describeOp(&o.a, r.pa), msg)
		}
		for _, k := range o.keys[:o.a.N] {
			if !seen[k] {
				seen[k] = true
				touched = append(touched, k)
			}
		}
	}
	r.compareStored(shape, touched)
	r.stats.ops += len(ops)
}

// differ describes how the flight's outcome a of o differs from the one by
// one outcome b ("" when it does not): on a frozen or caller's clock every
// field; on a real server's clock the fields that do not depend on the
// instant (see TestBatchRandomFlightsAsOneByOne).
func (r *randomFlights) differ(o *rfOp, a, b outcome) string {
	other := slices.ContainsFunc(o.keys[:o.a.N], (*rfKey).otherType)
	if a.err != nil || b.err != nil {
		if a.err == nil || b.err == nil || !other ||
			!strings.Contains(a.err.Error(), "WRONGTYPE") || !strings.Contains(b.err.Error(), "WRONGTYPE") {
			return fmt.Sprintf("batched error %v, one by one %v (a key of another type: %v)", a.err, b.err, other)
		}
		r.stats.wrongs++
		return ""
	}
	if other {
		return fmt.Sprintf("decided (%+v) on a key of another type, want WRONGTYPE", a.res)
	}
	if !b.res.Allowed {
		r.stats.denied++
	}
	if o.a.Refund {
		r.stats.refunds++
	}
	ra, rb := a.res, b.res
	if !r.fake {
		ra, rb = serverClockView(&o.a, ra), serverClockView(&o.a, rb)
	}
	if !reflect.DeepEqual(ra, rb) {
		return fmt.Sprintf("batched %+v, one by one %+v", a.res, b.res)
	}
	return ""
}

// serverClockView is res without what depends on the instant on a running
// server clock: now, the delays, a bucket's TAT; what stays is whether a
// quota retries and whether it writes, and a window's index.
func serverClockView(op *limitstore.Op, res limitstore.Result) limitstore.Result {
	res.NowMS = 0
	for i := range res.Quotas {
		q := &res.Quotas[i]
		q.RetryAfterMS, q.ResetAfterMS, q.TTLMS = min(q.RetryAfterMS, 1), 0, min(q.TTLMS, 1)
		if i >= op.N || op.Quotas[i].Algorithm == limit.TokenBucket {
			q.Window = 0
		}
	}
	return res
}

// compareStored compares the values under keys on both sides: the bytes
// (on a real server's clock the length, and a window's state), and on
// miniredis the PTTL, elsewhere whether the key has a deadline.
func (r *randomFlights) compareStored(shape rfShape, keys []*rfKey) {
	t := r.t
	var cmds rueidis.Commands
	var ks []*rfKey
	for _, k := range keys {
		if k.otherType() {
			continue
		}
		ks = append(ks, k)
		for _, p := range []string{r.pa, r.pb} {
			cmds = append(cmds, r.client.B().Get().Key(p+k.id).Build(), r.client.B().Pttl().Key(p+k.id).Build())
		}
	}
	resps := r.client.DoMulti(ctxT(t), cmds...)
	for i, k := range ks {
		va, ea := resps[4*i].ToString()
		pa, epa := resps[4*i+1].AsInt64()
		vb, eb := resps[4*i+2].ToString()
		pb, epb := resps[4*i+3].AsInt64()
		bad := ""
		switch {
		case epa != nil || epb != nil || (ea != nil && !rueidis.IsRedisNil(ea)) || (eb != nil && !rueidis.IsRedisNil(eb)):
			bad = fmt.Sprintf("errors %v, %v, %v, %v", ea, epa, eb, epb)
		case (ea == nil) != (eb == nil):
			bad = "exists on one side only"
		case r.fake && va != vb, !r.fake && !sameServerClockValue(k, va, vb):
			bad = "different values"
		case r.be.mini != nil && pa != pb, (pa < 0 || pb < 0) && pa != pb:
			bad = "different PTTLs"
		}
		if bad != "" {
			t.Errorf("flight %d (%s), key %q: %s: batched %x (PTTL %d), one by one %x (PTTL %d)",
				r.flights, shape, k.id, bad, va, pa, vb, pb)
		}
	}
}

// sameServerClockValue: two values written at other instants: the same
// length, and for a window the same state (index, count, previous count).
func sameServerClockValue(k *rfKey, a, b string) bool {
	switch {
	case len(a) != len(b):
		return false
	case len(a) != 40:
		return a == b
	case k.alg != limit.TokenBucket:
		return a[:24] == b[:24]
	}
	return true
}

// argOf is op's argument as the Store encodes it (waiter.encode), at now
// on the caller's clock (else 0: the server's TIME).
func argOf(op *limitstore.Op, now int64, callerClock bool) string {
	if !callerClock {
		now = 0
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(now))
	b = binary.LittleEndian.AppendUint64(b, uint64(op.Cost))
	for i := range op.N {
		q := &op.Quotas[i]
		x := q.PhaseMS
		if q.Algorithm == limit.TokenBucket {
			x = q.Burst
		}
		for _, v := range []int64{int64(q.Algorithm), q.Limit, q.WindowMS, x} {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		if op.Refund {
			b = binary.LittleEndian.AppendUint64(b, uint64(q.Window))
			b = binary.LittleEndian.AppendUint64(b, uint64(q.Epoch))
		}
	}
	return string(b)
}

// describeOp is op in a line, its keys without the set's prefix.
func describeOp(op *limitstore.Op, prefix string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{cost %d refund %v:", op.Cost, op.Refund)
	for i := range op.N {
		q := &op.Quotas[i]
		k := strings.TrimPrefix(string(q.Key), prefix)
		if len(k) > 40 {
			k = k[:40] + "..."
		}
		fmt.Fprintf(&b, " %q %v %d/%dms phase %d burst %d window %d;", k, q.Algorithm, q.Limit, q.WindowMS, q.PhaseMS, q.Burst, q.Window)
	}
	return b.String() + "}"
}
