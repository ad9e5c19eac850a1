//go:build linux

package edt

import (
	"testing"
	"unsafe"
)

// TestObjectVerifies loads the embedded classifier into this kernel: the
// verifier checks every path, bounds and the context offsets, and the
// object must hold both programs and the maps by the names and sizes
// objects.go uses.
// Its behaviour is TestClassifierInKernel's here, and the kernel lab's
// with fq (make kernel-lab SUITE=edt).
func TestObjectVerifies(t *testing.T) {
	o := loadC(t)
	if o.m.KeySize() != keySize || o.m.ValueSize() != valueSize {
		t.Errorf("delay map key %d value %d bytes, want %d and %d (struct key, struct entry)", o.m.KeySize(), o.m.ValueSize(), keySize, valueSize)
	}
	if n := uint32(unsafe.Sizeof(Counters{})); o.cnt.KeySize() != keySize || o.cnt.ValueSize() != n {
		t.Errorf("counter map key %d value %d bytes, want %d and %d (struct counters)", o.cnt.KeySize(), o.cnt.ValueSize(), keySize, n)
	}
	if o.st.KeySize() != keySize || o.st.ValueSize() != stateSize {
		t.Errorf("state map key %d value %d bytes, want %d and %d (struct state)", o.st.KeySize(), o.st.ValueSize(), keySize, stateSize)
	}
	if o.flow.KeySize() != fkeySize || o.flow.ValueSize() != 24 {
		t.Errorf("flow map key %d value %d bytes, want %d and 24 (struct fkey, struct flow)", o.flow.KeySize(), o.flow.ValueSize(), fkeySize)
	}
	if o.conn.KeySize() != 24 || o.conn.ValueSize() != 8 {
		t.Errorf("connection map key %d value %d bytes, want 24 and 8 (struct ckey, a departure time)", o.conn.KeySize(), o.conn.ValueSize())
	}
}
