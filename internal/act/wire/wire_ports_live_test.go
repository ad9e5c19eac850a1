package wire

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// sendTo sends n bytes from the client namespace to port of the server's
// address, where a listener started by listenOn reads them.
func sendTo(t *testing.T, port, n int) {
	t.Helper()
	py := fmt.Sprintf("import socket\ns=socket.create_connection(('10.218.0.1',%d))\ns.sendall(b'x'*%d)\ns.close()", port, n)
	if out, err := exec.Command("ip", "netns", "exec", wireCliNS, "python3", "-c", py).CombinedOutput(); err != nil {
		t.Fatalf("sending to port %d: %v: %s", port, err, out)
	}
}

// listenOn reads every connection to port in the server namespace.
func listenOn(t *testing.T, port int) {
	t.Helper()
	py := fmt.Sprintf("import socket\nl=socket.socket()\nl.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\nl.bind(('10.218.0.1',%d))\nl.listen()\nwhile True:\n c,_=l.accept()\n while c.recv(65536): pass\n c.close()", port)
	cmd := exec.Command("ip", "netns", "exec", wireSrvNS, "python3", "-c", py)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// N8: SetPorts moves the counting to new ports (a reload of ports), and
// the clients' counters go on rather than restart.
func TestWireSetPortsLive(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, iptables, ipset)")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3")
	}
	wireSetupNS(t)
	listenOn(t, wirePort)
	listenOn(t, wirePort+1)
	time.Sleep(300 * time.Millisecond)
	nsh, err := netns.GetFromName(wireSrvNS)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	run := owned.ExecRunner{Prefix: []string{"ip", "netns", "exec", wireSrvNS}}
	w, err := OpenWire(t.Context(), WireConfig{Instance: "t17p", Ports: []uint16{wirePort}, Firewall: &owned.Iptables{Run: run}, Handle: h, NetNS: int(nsh)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	client := netip.MustParseAddr("10.218.0.2")
	if err := w.SetClients([]netip.Addr{client}); err != nil {
		t.Fatal(err)
	}
	sent := func() uint64 {
		t.Helper()
		c, err := w.Read()
		if err != nil {
			t.Fatal(err)
		}
		return c[client].Sent
	}
	const mb = 1 << 20
	sendTo(t, wirePort, mb)
	first := sent()
	sendTo(t, wirePort+1, mb)
	if got := sent(); got != first || first < mb {
		t.Fatalf("before SetPorts: %d bytes counted after 1 MiB to the counted port, %d after 1 MiB more to another", first, got)
	}
	if err := w.SetPorts(t.Context(), []uint16{wirePort, wirePort + 1}, nil); err != nil {
		t.Fatal(err)
	}
	sendTo(t, wirePort+1, mb)
	if got := sent(); got < first+mb {
		t.Fatalf("after SetPorts: %d bytes counted, want the %d before and 1 MiB to the new port", got, first)
	}
}
