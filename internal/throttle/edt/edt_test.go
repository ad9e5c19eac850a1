//go:build linux

package edt

import (
	"testing"
)

// TestObjectVerifies loads the embedded classifier into this kernel: the
// verifier checks every path, bounds and the context offsets, and the
// object must hold the program and both maps by the names edt.go uses.
// Its behaviour is TestClassifierInKernel's here, and the kernel lab's
// with fq (make kernel-lab SUITE=edt).
func TestObjectVerifies(t *testing.T) {
	o := loadC(t)
	if o.m.KeySize() != keySize || o.m.ValueSize() != valueSize {
		t.Errorf("delay map key %d value %d bytes, want %d and %d (struct key, struct entry)", o.m.KeySize(), o.m.ValueSize(), keySize, valueSize)
	}
	if o.cnt.KeySize() != keySize {
		t.Errorf("counter map key %d bytes, want %d", o.cnt.KeySize(), keySize)
	}
}
