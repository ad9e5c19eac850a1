package ctl

import (
	"testing"

	"github.com/sanqos/sanqos/internal/act/throttle"
)

// FuzzParseManual: whatever a client sends, a request ParseManual
// accepts is one the backends can program: an address, a delay in
// range, a direction, 1 to throttle.MaxPorts distinct ports.
func FuzzParseManual(f *testing.F) {
	f.Add("10.0.0.3", "4.6ms", "both", []byte{0x0c, 0xbc})
	f.Add("fd00::3", "1s", "", []byte{})
	f.Add("10.0.0.3", "1ms", "write", make([]byte, 40))
	f.Fuzz(func(t *testing.T, ip, delay, dir string, portBytes []byte) {
		var ports []uint16
		for i := 0; i+1 < len(portBytes); i += 2 {
			ports = append(ports, uint16(portBytes[i])<<8|uint16(portBytes[i+1]))
		}
		m, err := ParseManual(Request{Op: OpThrottle, IP: ip, Delay: delay, Direction: dir, Ports: ports})
		if err != nil {
			return
		}
		if m.Delay <= 0 || m.Delay > MaxDelay {
			t.Fatalf("delay %v accepted", m.Delay)
		}
		if len(m.Ports) == 0 || throttle.ValidatePorts(m.Ports) != nil {
			t.Fatalf("ports %v accepted", m.Ports)
		}
		if !m.IP.IsValid() {
			t.Fatalf("address %q accepted as %v", ip, m.IP)
		}
	})
}
