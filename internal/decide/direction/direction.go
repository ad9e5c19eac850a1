// Package direction names which of a consumer's I/O directions a delay
// slows: the one word the decision (internal/decide/engine) and the data path
// (internal/act/throttle) share. It is a leaf, so the engine can use it
// without linking the data path.
package direction

import "fmt"

// Direction says which of a consumer's I/O directions is slowed down.
type Direction uint8

const (
	// Write slows the consumer's writes: the data path delays the packets
	// that clock them (pure ACKs, iSCSI R2T and SCSI response PDUs).
	Write Direction = 1 << iota
	// Read slows the consumer's reads: the data segments that carry them.
	Read
	// Both slows everything the target sends the consumer.
	Both = Write | Read
)

func (d Direction) String() string {
	switch d {
	case Write:
		return "write"
	case Read:
		return "read"
	case Both:
		return "both"
	}
	return fmt.Sprintf("direction(%d)", uint8(d))
}

// Parse reads "write", "read" or "both".
func Parse(s string) (Direction, error) {
	switch s {
	case "write":
		return Write, nil
	case "read":
		return Read, nil
	case "both":
		return Both, nil
	}
	return 0, fmt.Errorf("direction %q: want write, read or both", s)
}
