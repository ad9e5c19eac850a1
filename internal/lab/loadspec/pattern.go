package loadspec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// The verify pattern: every block starts with a header naming the seed and
// the block's own offset and carrying a CRC-32C of the whole block, followed
// by pseudo-random bytes derived from (seed, offset). A read-back block is
// compared byte for byte with what was written; the header tells apart a
// block never written, one that landed at the wrong offset, and one whose
// bytes were damaged.
const (
	patternMagic = "SQLGv1\x00\x00"
	headerLen    = 32 // magic 8, seed 8, offset 8, crc 4, reserved 4
	crcAt        = 24
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MinVerifyBlock is the smallest block size the pattern fits in.
const MinVerifyBlock = headerLen

// FillPattern writes the pattern of the block at offset into buf.
func FillPattern(buf []byte, seed, offset int64) {
	copy(buf, patternMagic)
	binary.LittleEndian.PutUint64(buf[8:], uint64(seed))
	binary.LittleEndian.PutUint64(buf[16:], uint64(offset))
	clear(buf[crcAt:headerLen])
	x := splitmix(uint64(seed)) ^ uint64(offset)
	i := headerLen
	for ; i+8 <= len(buf); i += 8 {
		x = splitmix(x)
		binary.LittleEndian.PutUint64(buf[i:], x)
	}
	if i < len(buf) {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], splitmix(x))
		copy(buf[i:], tail[:])
	}
	binary.LittleEndian.PutUint32(buf[crcAt:], crc32.Checksum(buf, castagnoli))
}

// CheckPattern compares a read-back block with the pattern expected at
// offset. want is scratch space of the same length. It returns nil when the
// block is intact, or an error that says what is wrong with it.
func CheckPattern(got, want []byte, seed, offset int64) error {
	FillPattern(want, seed, offset)
	if bytes.Equal(got, want) {
		return nil
	}
	if len(got) < headerLen || string(got[:8]) != patternMagic {
		if isZero(got) {
			return fmt.Errorf("block at %d: all zeroes, never written", offset)
		}
		return fmt.Errorf("block at %d: no pattern header, foreign data", offset)
	}
	stored := binary.LittleEndian.Uint32(got[crcAt:])
	tmp := bytes.Clone(got)
	clear(tmp[crcAt:headerLen])
	if crc32.Checksum(tmp, castagnoli) != stored {
		return fmt.Errorf("block at %d: checksum mismatch, data damaged", offset)
	}
	if s, o := int64(binary.LittleEndian.Uint64(got[8:])), int64(binary.LittleEndian.Uint64(got[16:])); o != offset || s != seed {
		return fmt.Errorf("block at %d: holds the block of offset %d seed %d, misplaced or stale", offset, o, s)
	}
	return fmt.Errorf("block at %d: differs from the pattern", offset)
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
