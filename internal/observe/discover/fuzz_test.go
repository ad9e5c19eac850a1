package discover

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseTgtShow: tgtadm's output is parsed as root every discovery;
// whatever tgtd prints (or a tgtd built with other messages), the parser
// must return, not panic, and every target it returns must be usable.
func FuzzParseTgtShow(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "tgt", "show-target.txt")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("Target 1: iqn.x\n    I_T nexus information:\n        I_T nexus: 1\n            Initiator: iqn.y alias: h\n            Connection: 0\n                IP Address: 10.0.0.3\n    LUN information:\n        LUN: 1\n            Backing store path: /dev/loop1\n"))
	f.Add([]byte("Target 0:\nTarget 4294967296: x\n  IP Address: ::ffff:10.0.0.1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		targets, err := ParseTgtShow(b)
		if err != nil {
			return
		}
		for _, tg := range targets {
			for _, n := range tg.Nexus {
				for _, a := range n.Addrs {
					if !a.IsValid() {
						t.Fatalf("target %q: an invalid address was accepted", tg.Name)
					}
				}
			}
		}
	})
}

// FuzzParseLIOInfo: an acls/<iqn>/info file of LIO's configfs.
func FuzzParseLIOInfo(f *testing.F) {
	matches, _ := filepath.Glob(filepath.Join("testdata", "lio", "target", "iscsi", "*", "*", "acls", "*", "info"))
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("InitiatorName: iqn.x\nInitiatorAlias: h\nLIO Session ID: 1\n  Address 192.168.69.3 TCP  StatSN: 0x1\n"))
	f.Add([]byte("No active iSCSI Session for Initiator Endpoint: iqn.x\n"))
	f.Add([]byte("Address\nAddress [fe80::1] TCP\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, active, err := ParseLIOInfo(b)
		if err != nil {
			return
		}
		if active && len(s.Addrs) == 0 {
			t.Fatal("an active session without an address")
		}
		for _, a := range s.Addrs {
			if !a.IsValid() || a.Is4In6() {
				t.Fatalf("address %v accepted (invalid or not unmapped)", a)
			}
		}
	})
}
