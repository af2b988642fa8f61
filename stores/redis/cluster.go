package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/engine/guard"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/redis/rueidis"
)

// Failure isolation on a Redis Cluster. A guarded Store on a Cluster
// client keeps one guard (timeout, circuit breaker, deny cache) per
// master, and its own map of the hash slots to the masters (CLUSTER
// SLOTS): a decision goes to its key's master, through the cluster
// client's own connection to that node, behind that node's guard. A dead
// or hung master thus opens the breaker (and the failure mode) for its
// own slots only; the identities on the other masters keep being decided
// by Redis. The map is read again when a decision finds it older than
// clusterRefresh, and at once (at most every clusterRefreshMin) while a
// node's breaker is open, on a goroutine that ends with the reading (no
// goroutine outlives a Store that is not used): a slot whose master failed
// over reaches the new master within about clusterRefreshMin of the
// promotion when its own decisions fail, and within clusterRefresh when it
// had no traffic. A node that answers MOVED or ASK (a slot that moved
// since the map was read) gets the call again through the cluster client,
// which follows the redirection.
const (
	clusterRefresh      = time.Second
	clusterRefreshMin   = 100 * time.Millisecond
	clusterSlotsTimeout = 500 * time.Millisecond
	clusterSlots        = 16384
)

// nodeRoute is one master as the Store routes to it: its address, the
// cluster client's connection to it and its guard.
type nodeRoute struct {
	addr   string
	client atomic.Pointer[clientBox] // nil: not among the client's nodes yet; calls go through the cluster client
	guard  *guard.Store
	open   atomic.Bool // its breaker is open and counted in clusterRoutes.open
}

type clientBox struct{ c rueidis.Client }

// routeTable maps each hash slot to its master: nodes[slots[i]], where
// nodes[0] is nil (a slot no master serves: the Store's own guard and the
// cluster client's routing).
type routeTable struct {
	slots  [clusterSlots]uint16
	nodes  []*nodeRoute
	ranges []slotRange // as read, to tell whether a new reading changes anything
}

type slotRange struct {
	from, to int64
	addr     string
}

// clusterRoutes is a guarded Cluster Store's per-node state.
type clusterRoutes struct {
	table  atomic.Pointer[routeTable]
	client rueidis.Client
	start  time.Time    // the monotonic clock's anchor
	due    atomic.Int64 // ns since start when a decision starts the next reading
	last   atomic.Int64 // ns since start the latest reading started
	busy   atomic.Bool  // a reading is under way

	open atomic.Int32 // masters whose breaker is open

	mu    sync.Mutex
	nodes map[string]*nodeRoute // every master seen, by address
	opts  []guard.Option        // the Store's guard options, for a node's guard
	obs   guard.Observer        // the user's observer, or nil
}

// route returns the guard of op's master, or nil when the slot's master
// is not known; a map older than clusterRefresh is read again meanwhile.
func (cr *clusterRoutes) route(s *Store, op *limitstore.Op) *nodeRoute {
	if int64(time.Since(cr.start)) >= cr.due.Load() {
		cr.refresh(s)
	}
	t := cr.table.Load()
	if t == nil || op.N < 1 {
		return nil
	}
	return t.nodes[t.slots[hashSlot(op.Quotas[0].Key)]]
}

// refreshSoon starts a reading of the slots unless one started within
// clusterRefreshMin; it never blocks.
func (cr *clusterRoutes) refreshSoon(s *Store) {
	if int64(time.Since(cr.start))-cr.last.Load() >= int64(clusterRefreshMin) {
		cr.refresh(s)
	}
}

// refresh reads the slots on a goroutine of its own, unless a reading is
// under way; the goroutine ends with it (at most 3 nodes asked, each
// within clusterSlotsTimeout).
func (cr *clusterRoutes) refresh(s *Store) {
	if s.closed.Load() || !cr.busy.CompareAndSwap(false, true) {
		return
	}
	now := int64(time.Since(cr.start))
	cr.last.Store(now)
	cr.due.Store(now + int64(clusterRefresh))
	go func() {
		defer cr.busy.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 3*clusterSlotsTimeout)
		defer cancel()
		s.refreshRoutes(ctx, cr, cr.client)
	}()
}

// startCluster sets up per-node routing for a Cluster client c: one
// reading of the slots now (bounded by ctx).
func (s *Store) startCluster(ctx context.Context, c rueidis.Client) {
	cr := &clusterRoutes{
		client: c,
		start:  time.Now(),
		nodes:  map[string]*nodeRoute{},
		opts:   s.guardOpts,
		obs:    s.observer,
	}
	cr.due.Store(int64(clusterRefresh))
	s.refreshRoutes(ctx, cr, c)
	s.cluster.Store(cr)
}

// refreshRoutes reads CLUSTER SLOTS from one of c's nodes (in random
// order, each within clusterSlotsTimeout, until one answers) and installs
// the table when it changed; the connections of the nodes are taken anew
// from c in any case (the cluster client replaces a node's connection
// when its topology changes).
func (s *Store) refreshRoutes(ctx context.Context, cr *clusterRoutes, c rueidis.Client) {
	clients := c.Nodes()
	addrs := make([]string, 0, len(clients))
	for a := range clients {
		addrs = append(addrs, a)
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	var ranges []slotRange
	for _, a := range addrs {
		n := clients[a]
		cctx, cancel := context.WithTimeout(ctx, clusterSlotsTimeout)
		rs, err := readSlots(cctx, n, a)
		cancel()
		if err == nil && len(rs) > 0 {
			ranges = rs
			break
		}
		if errors.Is(err, rueidis.ErrClosing) || ctx.Err() != nil {
			break
		}
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	old := cr.table.Load()
	if ranges != nil && (old == nil || !sameRanges(old.ranges, ranges)) {
		t := &routeTable{nodes: []*nodeRoute{nil}, ranges: ranges}
		index := map[string]uint16{}
		for _, r := range ranges {
			i, ok := index[r.addr]
			if !ok {
				i = uint16(len(t.nodes))
				index[r.addr] = i
				t.nodes = append(t.nodes, cr.node(s, r.addr))
			}
			for sl := max(r.from, 0); sl <= min(r.to, clusterSlots-1); sl++ {
				t.slots[sl] = i
			}
		}
		cr.table.Store(t)
		for addr, n := range cr.nodes {
			if _, ok := index[addr]; !ok {
				cr.retire(n)
			}
		}
	}
	for addr, n := range cr.nodes {
		if cl, ok := clients[addr]; ok {
			n.client.Store(&clientBox{cl})
		} else {
			n.client.Store(nil)
		}
	}
}

// node returns the route of the master at addr, made with its own guard
// the first time; cr.mu is held.
func (cr *clusterRoutes) node(s *Store, addr string) *nodeRoute {
	if n, ok := cr.nodes[addr]; ok {
		return n
	}
	n := &nodeRoute{addr: addr}
	opts := append(cr.opts[:len(cr.opts):len(cr.opts)],
		guard.WithLogger(s.logger.With(slog.String("redis_node", addr))),
		guard.WithObserver(nodeObserver{s, cr, n, cr.obs}))
	g, err := guard.New(&nodeBackend{s, n}, opts...)
	if err != nil {
		panic(err) // every option was checked when it was applied
	}
	n.guard = g
	cr.nodes[addr] = n
	return n
}

// readSlots asks n (at addr) for CLUSTER SLOTS: each range's master.
func readSlots(ctx context.Context, n rueidis.Client, addr string) ([]slotRange, error) {
	vs, err := n.Do(ctx, n.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(addr)
	var rs []slotRange
	for _, v := range vs {
		e, err := v.ToArray()
		if err != nil || len(e) < 3 {
			continue
		}
		from, err1 := e[0].AsInt64()
		to, err2 := e[1].AsInt64()
		m, err3 := e[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(m) < 2 {
			continue
		}
		h, _ := m[0].ToString()
		port, err := m[1].AsInt64()
		if err != nil || h == "?" {
			continue
		}
		if h == "" {
			h = host
		}
		rs = append(rs, slotRange{from, to, net.JoinHostPort(h, strconv.FormatInt(port, 10))})
	}
	return rs, nil
}

func sameRanges(a, b []slotRange) bool {
	if len(a) != len(b) {
		return false
	}
	m := make(map[slotRange]bool, len(a))
	for _, r := range a {
		m[r] = true
	}
	for _, r := range b {
		if !m[r] {
			return false
		}
	}
	return true
}

// nodeObserver passes a node's guard events on to the user's observer and
// asks for a reading of the slots while the node's breaker is open (its
// slots may have a new master). The Store is one store to the observer:
// every opening is passed on, a closing only when no master's breaker is
// open any more (so that a gauge of "open" reads 1 while any is).
type nodeObserver struct {
	s    *Store
	cr   *clusterRoutes
	n    *nodeRoute
	next guard.Observer
}

func (o nodeObserver) StoreEvent(store, event string) {
	switch event {
	case "opened":
		if o.n.open.CompareAndSwap(false, true) {
			o.cr.open.Add(1)
		}
		o.cr.refreshSoon(o.s)
	case "breaker-open":
		o.cr.refreshSoon(o.s)
	case "closed":
		if !o.n.open.CompareAndSwap(true, false) || o.cr.open.Add(-1) > 0 {
			return // retired already (see retire), or another master's is open
		}
	}
	if o.next != nil {
		o.next.StoreEvent(store, event)
	}
}

// retire stops counting n's open breaker once n serves no slot (a master
// that failed over: no call reaches it any more, so it never closes), and
// reports the Store's breaker closed when no other is open.
func (cr *clusterRoutes) retire(n *nodeRoute) {
	if !n.open.CompareAndSwap(true, false) || cr.open.Add(-1) > 0 || cr.obs == nil {
		return
	}
	func() {
		defer func() { _ = recover() }() // as the guard does for its own events
		cr.obs.StoreEvent("redis", "closed")
	}()
}

// nodeBackend is the Store's script call to one master, which that
// master's guard wraps.
type nodeBackend struct {
	s *Store
	n *nodeRoute
}

func (b *nodeBackend) Describe() limitstore.Info {
	return limitstore.Info{Name: "redis", Shared: true, Blocks: true}
}

// Take sends op to the node; a MOVED or ASK answer (the slot moved: the
// script did not run) sends it again through the cluster client, which
// follows the redirection, and asks for a new reading of the slots.
func (b *nodeBackend) Take(ctx context.Context, op *limitstore.Op, res *limitstore.Result) (err error) {
	*res, err = b.take(ctx, op)
	return err
}

// take is Take, returning the Result.
func (b *nodeBackend) take(ctx context.Context, op *limitstore.Op) (limitstore.Result, error) {
	if blocked(op) {
		return b.blockNode(ctx, op) // block.go
	}
	if op.Peek {
		return b.peek(ctx, op)
	}
	var via rueidis.Client
	if cb := b.n.client.Load(); cb != nil {
		via = cb.c
	}
	res, err := b.s.scriptVia(ctx, op, via)
	if via == nil || err == nil {
		return res, err
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		_, moved := re.IsMoved()
		_, ask := re.IsAsk()
		if moved || ask {
			if cr := b.s.cluster.Load(); cr != nil {
				cr.refreshSoon(b.s)
			}
			return b.s.scriptVia(ctx, op, nil)
		}
	}
	return res, err
}

// hashSlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the first "{...}" with something inside) or of the whole key,
// modulo 16384.
func hashSlot(key []byte) uint16 {
	for i, c := range key {
		if c == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						key = key[i+1 : j]
					}
					break
				}
			}
			break
		}
	}
	var crc uint16
	for _, c := range key {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^c]
	}
	return crc & (clusterSlots - 1)
}

// crc16Table is CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the
// checksum Redis Cluster hashes keys with.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
