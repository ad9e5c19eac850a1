//go:build linux

package edt

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
)

// Load loads the programs and their maps without a device, to run them
// on one packet at a time (Run): for tests and benchmarks that need no
// fq. Close releases them.
func Load() (*EDT, error) {
	o, err := load()
	if err != nil {
		return nil, err
	}
	return &EDT{objects: o}, nil
}

// skbSize is struct __sk_buff's size on recent kernels; tstamp is at
// skbTstamp (UAPI).
const (
	skbSize   = 192
	skbTstamp = 152
)

// Run runs the egress classifier, or with ingress the arming program,
// once on the Ethernet frame pkt in this kernel (BPF_PROG_TEST_RUN) and
// returns the departure time it gave (0: none).
func (e *EDT) Run(pkt []byte, ingress bool) (uint64, error) {
	p := e.prog
	if ingress {
		p = e.arm
	}
	in, out := make([]byte, skbSize), make([]byte, skbSize)
	ret, err := p.Run(&ebpf.RunOptions{Data: pkt, Context: in, ContextOut: out})
	if err != nil {
		return 0, fmt.Errorf("edt: test-running the program: %w", err)
	}
	if ret != 0 {
		return 0, fmt.Errorf("edt: verdict %d, want TC_ACT_OK (0): the programs pass every packet", ret)
	}
	return binary.LittleEndian.Uint64(out[skbTstamp:]), nil
}

// FlowDelay is the delay the rise limit last applied to one direction
// (Write or Read) of the flow between the initiator at addr:iport and
// the target's port, and whether the program remembers one (a flow at
// 0 is not remembered).
func (e *EDT) FlowDelay(addr netip.Addr, iport, port uint16, dir Direction) (time.Duration, bool) {
	k := make([]byte, fkeySize)
	a := addr.Unmap()
	if a.Is4() {
		a = netip.AddrFrom16(a.As16()) // ::ffff:a.b.c.d, as the program keys it
	}
	b := a.As16()
	copy(k, b[:])
	binary.NativeEndian.PutUint16(k[16:], iport)
	binary.NativeEndian.PutUint16(k[18:], port)
	d := uint16(dirWrite)
	if dir == Read {
		d = dirRead
	}
	binary.NativeEndian.PutUint16(k[20:], d)
	v, err := e.flow.LookupBytes(k)
	if err != nil || v == nil {
		return 0, false
	}
	return time.Duration(binary.LittleEndian.Uint64(v)), true
}
