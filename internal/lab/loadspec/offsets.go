package loadspec

import "math/bits"

// Offsets yields the byte offsets of one thread's I/O within its region:
// in order for sequential modes, and for random modes in a seeded
// permutation that visits every block exactly once per pass (fio's default
// random map), so a random write pass can be verified block by block and
// random reads never favour a part of the region. The permutation needs no
// memory: a full-period LCG over the next power of two, scrambled by a
// bijective mix, skipping values past the last block.
type Offsets struct {
	r      Region
	bs     int64
	blocks uint64
	random bool

	i    uint64 // position within the pass
	pass int64

	mask, inc, x uint64 // LCG state, modulo mask+1
	shift        uint
	mul          uint64
}

// NewOffsets returns the offset sequence of region r with block size bs.
func NewOffsets(r Region, bs int64, random bool, seed int64) *Offsets {
	o := &Offsets{r: r, bs: bs, blocks: uint64(r.Len / bs), random: random}
	if random && o.blocks > 1 {
		k := uint(bits.Len64(o.blocks - 1))
		o.mask = 1<<k - 1
		h := splitmix(uint64(seed))
		o.inc = (h | 1) & o.mask // odd increment: full period (Hull–Dobell)
		o.x = splitmix(h) & o.mask
		o.shift = (k + 1) / 2
		o.mul = splitmix(h+1) | 1 // odd: multiplication is a bijection mod 2^k
	}
	return o
}

// Next returns the offset of the next I/O and whether it starts a new pass
// over the region (true for the first I/O too).
func (o *Offsets) Next() (off int64, newPass bool) {
	if o.i == o.blocks {
		o.i = 0
		o.pass++
	}
	newPass = o.i == 0
	var blk uint64
	if o.random && o.blocks > 1 {
		for {
			// The multiplier ≡ 1 mod 4 and the odd increment give the LCG
			// the full period mask+1 (Hull–Dobell).
			o.x = (o.x*6364136223846793005 + o.inc) & o.mask
			if blk = o.mix(o.x); blk < o.blocks {
				break
			}
		}
	} else {
		blk = o.i
	}
	o.i++
	return o.r.Start + int64(blk)*o.bs, newPass
}

// Pass is the number of completed passes.
func (o *Offsets) Pass() int64 { return o.pass }

// Blocks is the number of blocks in one pass.
func (o *Offsets) Blocks() int64 { return int64(o.blocks) }

// mix is a bijection of [0, mask] that breaks up the LCG's regular low bits.
func (o *Offsets) mix(x uint64) uint64 {
	if o.shift > 0 {
		x ^= x >> o.shift
	}
	x = (x * o.mul) & o.mask
	if o.shift > 0 {
		x ^= x >> o.shift
	}
	return x
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
