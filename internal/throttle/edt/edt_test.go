//go:build linux

package edt

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/cilium/ebpf"
)

// TestProgramVerifies loads the classifier into this kernel: the verifier
// checks every path, bounds and the context offsets. Its behaviour is
// tested live in the kernel lab (make kernel-lab SUITE=edt), on a kernel
// with fq.
func TestProgramVerifies(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading BPF needs root")
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: valueSize, MaxEntries: 16})
	if err != nil {
		t.Skipf("this kernel cannot create BPF maps: %v", err)
	}
	defer m.Close()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL", Instructions: program(m.FD())})
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		t.Fatalf("the verifier refused the classifier: %+v", ve)
	}
	if err != nil {
		t.Skipf("this kernel cannot load a classifier: %v", err)
	}
	p.Close()
}

// TestProgramAssembles checks the jumps resolve without a kernel.
func TestProgramAssembles(t *testing.T) {
	insns := program(3)
	if err := insns.Marshal(discard{}, nativeEndian()); err != nil {
		t.Fatal(err)
	}
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

func nativeEndian() binary.ByteOrder { return binary.LittleEndian }
