package refmodel

// Block is a model of a block rule (Policy.BlockFor, BlockMax) kept as the
// list of the blocks an identity served, each with its start and length:
// no shared code with Op.ApplyBlock. The rules it encodes are the
// documented ones: a limited request outside a block begins one, For long,
// or, when it begins before Max has passed since the end of the last block
// (Max > 0), twice the last one's length, at least For and at most Max; a
// request during a block is limited by it and changes nothing.
type Block struct {
	For, Max int64
	starts   []int64
	lens     []int64
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

// Forget drops every block and offence (a Reset).
func (b *Block) Forget() { b.starts, b.lens = nil, nil }
