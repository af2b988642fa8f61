package refmodel

// Block is a model of a block rule (Policy.BlockFor, BlockMax) kept as the
// list of the blocks an identity served, each with its start and length:
// no shared code with Op.ApplyBlock. The rules it encodes are the
// documented ones: a limited request outside a block begins one, For long,
// or, when it begins before Max has passed since the end of the last block
// (Max > 0), twice the last one's length, at least For and at most Max; a
// request during a block is limited by it and changes nothing. With a
// Lease (a policy that counts by status), it also keeps every charge taken
// and not yet settled, each with its instant: a charge is unsettled until
// it is settled or until the end of the lease period (Lease ms, counted
// from the Unix epoch) after the one it was taken in, and a limited
// request begins no block while one is.
type Block struct {
	For, Max, Lease int64
	starts          []int64
	lens            []int64
	charges         map[int]int64 // unsettled charges by handle: their instants
	handles         int
}

// NewBlock returns the model of a rule of blocks For ms long, doubling up
// to Max ms (0: no doubling).
func NewBlock(forMS, maxMS int64) *Block { return &Block{For: forMS, Max: maxMS} }

// Left is the time left at t on the block in force, 0 when none is.
func (b *Block) Left(t int64) int64 {
	for i := len(b.starts) - 1; i >= 0; i-- {
		if end := b.starts[i] + b.lens[i]; b.starts[i] <= t && t < end {
			return end - t
		}
	}
	return 0
}

// Next is the length of a block beginning at t (none in force).
func (b *Block) Next(t int64) int64 {
	n := len(b.starts)
	if b.Max <= 0 || n == 0 {
		return b.For
	}
	last := b.lens[n-1]
	if t >= b.starts[n-1]+last+b.Max {
		return b.For
	}
	d := 2 * last
	if d < b.For {
		d = b.For
	}
	if d > b.Max {
		d = b.Max
	}
	return d
}

// Offend begins a block at t and returns its length.
func (b *Block) Offend(t int64) int64 {
	d := b.Next(t)
	b.starts, b.lens = append(b.starts, t), append(b.lens, d)
	return d
}

// Forget drops every block and offence (a Reset); the charges stay, as
// the requests that hold them are still in flight.
func (b *Block) Forget() { b.starts, b.lens = nil, nil }

// Charge records a charge taken at t and returns its handle.
func (b *Block) Charge(t int64) int {
	if b.charges == nil {
		b.charges = map[int]int64{}
	}
	b.handles++
	b.charges[b.handles] = t
	return b.handles
}

// Settle settles the charge of handle h (a Finish).
func (b *Block) Settle(h int) { delete(b.charges, h) }

// Unsettled is the number of charges unsettled at t (see Block): taken at
// c, not settled, and t before the end of the lease period after c's.
func (b *Block) Unsettled(t int64) int {
	if b.Lease <= 0 {
		return 0
	}
	n := 0
	for _, c := range b.charges {
		if end := (c/b.Lease + 2) * b.Lease; t < end {
			n++
		}
	}
	return n
}
