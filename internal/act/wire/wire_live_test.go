package wire

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/observe/attribution"
)

// Live test of the wire counters: namespaces sanqos-w17ws (server,
// 10.218.0.1) and sanqos-w17wc (client, 10.218.0.2), iperf3 between them.
const (
	wireSrvNS = "sanqos-w17ws"
	wireCliNS = "sanqos-w17wc"
	wirePort  = 5217
)

func wireCleanNS() {
	for _, ns := range []string{wireSrvNS, wireCliNS} {
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, pid := range strings.Fields(string(out)) {
				_ = exec.Command("kill", "-9", pid).Run()
			}
		}
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
}

func wireSetupNS(t *testing.T) {
	t.Helper()
	wireCleanNS()
	t.Cleanup(wireCleanNS)
	for _, c := range [][]string{
		{"ip", "netns", "add", wireSrvNS}, {"ip", "netns", "add", wireCliNS},
		{"ip", "link", "add", "sq17ws", "netns", wireSrvNS, "type", "veth", "peer", "name", "sq17wc", "netns", wireCliNS},
		{"ip", "-n", wireSrvNS, "addr", "add", "10.218.0.1/24", "dev", "sq17ws"},
		{"ip", "-n", wireCliNS, "addr", "add", "10.218.0.2/24", "dev", "sq17wc"},
		{"ip", "-n", wireSrvNS, "link", "set", "sq17ws", "up"}, {"ip", "-n", wireCliNS, "link", "set", "sq17wc", "up"},
		{"ip", "-n", wireSrvNS, "link", "set", "lo", "up"}, {"ip", "-n", wireCliNS, "link", "set", "lo", "up"},
		{"ip", "-n", wireSrvNS, "addr", "add", "fd17::1/64", "dev", "sq17ws", "nodad"},
		{"ip", "-n", wireCliNS, "addr", "add", "fd17::2/64", "dev", "sq17wc", "nodad"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
}

// iperf runs one iperf3 transfer from the client namespace (reverse: the
// server sends) and returns the bytes received and the rate, bit/s.
// sent is what the sender wrote: iperf3 leaves out of its received sum
// what arrives after its last interval, which a loaded machine makes
// up to 1 %.
func iperf(t *testing.T, secs int, reverse bool) (bytes, sent, bps float64) {
	return iperfTo(t, "10.218.0.1", secs, reverse)
}

func iperfTo(t *testing.T, server string, secs int, reverse bool) (bytes, sent, bps float64) {
	t.Helper()
	args := []string{"netns", "exec", wireCliNS, "iperf3", "-c", server, "-p", fmt.Sprint(wirePort), "-t", fmt.Sprint(secs), "-J"}
	if reverse {
		args = append(args, "-R")
	}
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		t.Fatalf("iperf3: %v: %s", err, out)
	}
	var r struct {
		End struct {
			SumReceived struct {
				Bytes         float64 `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			SumSent struct {
				Bytes float64 `json:"bytes"`
			} `json:"sum_sent"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("iperf3 output: %v", err)
	}
	return r.End.SumReceived.Bytes, r.End.SumSent.Bytes, r.End.SumReceived.BitsPerSecond
}

// wireEnv is the live test's server side: the counters' configuration
// in the server namespace, with its netlink handle and namespace.
type wireEnv struct {
	cfg    WireConfig
	run    owned.ExecRunner
	h      *netlink.Handle
	ns     int
	client netip.Addr
}

// TestWireLive counts bulk transfers in both directions, read every
// 100 ms as the daemon does, and logs the throughput without and with
// the counters, alternated. It asserts that the counters see the
// transferred bytes (each connection's to its close), only the client's,
// over IPv4 and IPv6, that they put no rule in the kernel, and that an
// older version's counting chains go at start-up.
func TestWireLive(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, iptables, ipset)")
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("needs iperf3 (apt-get install iperf3)")
	}
	wireSetupNS(t)
	srv := exec.Command("ip", "netns", "exec", wireSrvNS, "iperf3", "-s", "-p", fmt.Sprint(wirePort))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
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
	env := wireEnv{
		cfg: WireConfig{Instance: "t17", Ports: []uint16{wirePort}, Firewall: &owned.Iptables{Run: run}, Handle: h, NetNS: int(nsh)},
		run: run, h: h, ns: int(nsh), client: netip.MustParseAddr("10.218.0.2"),
	}
	wireCost(t, env)
	wireAssertClean(t, "Close")
	if save := wireSave(t); strings.Contains(save, "SANQOS") {
		t.Errorf("rules of ours while counting:\n%s", save)
	}
	wireIPv6(t, env)
	wireAssertClean(t, "Close (IPv6)")
	wireDeadSwept(t, env)
}

// wireCost alternates transfers without and with the counters.
func wireCost(t *testing.T, env wireEnv) {
	client := env.client
	const secs, pairs = 2, 3
	var off, on [2]float64 // [write, read] bit/s sums
	for i := range pairs {
		for d, rev := range []bool{false, true} {
			_, _, bps := iperf(t, secs, rev)
			off[d] += bps
			w, err := OpenWire(t.Context(), env.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.SetClients([]netip.Addr{client, netip.MustParseAddr("10.218.0.9")}); err != nil {
				t.Fatal(err)
			}
			var got, sent float64
			c := sampling(t, w, func() { got, sent, bps = iperf(t, secs, rev) })
			on[d] += bps
			if i == 0 {
				counted := float64(c[client].Sent)
				if rev {
					counted = float64(c[client].Received)
				}
				// The counters see payload bytes, the closed
				// connection's to its end: at least what iperf3
				// received, at most what it sent and its control
				// connection's few kB.
				if counted < got || counted > max(got, sent)+64<<10 {
					t.Errorf("reverse %v: counted %0.f bytes, iperf3 received %.0f and sent %.0f: want within", rev, counted, got, sent)
				}
				// The other direction carries ACKs only: not data, not
				// counted (a reader must not look like a writer).
				other := float64(c[client].Received)
				if rev {
					other = float64(c[client].Sent)
				}
				if other > 0.001*got {
					t.Errorf("reverse %v: %.0f bytes counted against the data's direction (ACKs), want none", rev, other)
				}
				if o := c[netip.MustParseAddr("10.218.0.9")]; o.Sent != 0 || o.Received != 0 {
					t.Errorf("a client that sent nothing counted %+v", o)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for d, name := range []string{"client sends (writes)", "server sends (reads)"} {
		t.Logf("wire counters on a bulk TCP transfer, %s: %.2f Gbit/s without, %.2f with: ratio %.3f (%d alternated pairs of %d s)",
			name, off[d]/pairs/1e9, on[d]/pairs/1e9, on[d]/off[d], pairs, secs)
	}
}

// sampling runs f while reading w every 100 ms, as the daemon does, and
// returns the counters read after f and a last tick: the connections f
// opened have closed by then, and count whole.
func sampling(t *testing.T, w *Wire, f func()) map[netip.Addr]attribution.Counters {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan error)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				done <- nil
				return
			case <-tick.C:
				if _, err := w.Read(); err != nil {
					done <- err
					return
				}
			}
		}
	}()
	f()
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	c, err := w.Read()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wireIPv6 counts a transfer over IPv6: ip6tables and inet6 sets.
func wireIPv6(t *testing.T, env wireEnv) {
	w6, err := OpenWire(t.Context(), env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	client6 := netip.MustParseAddr("fd17::2")
	if err := w6.SetClients([]netip.Addr{env.client, client6}); err != nil {
		t.Fatal(err)
	}
	var got, sent float64
	c := sampling(t, w6, func() { got, sent, _ = iperfTo(t, "fd17::1", 1, false) })
	if counted := float64(c[client6].Sent); counted < got || counted > max(got, sent)+64<<10 {
		t.Errorf("IPv6: counted %.0f bytes, iperf3 received %.0f and sent %.0f: want within", counted, got, sent)
	}
	if c[env.client].Sent != 0 {
		t.Errorf("IPv6 transfer counted for the IPv4 address: %+v", c[env.client])
	}
	if err := w6.Close(); err != nil {
		t.Fatal(err)
	}
}

// wireDeadSwept: the chains older versions counted with (jumped to from
// INPUT and POSTROUTING) are removed by OpenWire of the same instance,
// and a dead instance's by another instance's start-up sweep.
func wireDeadSwept(t *testing.T, env wireEnv) {
	leave := func(inst string) {
		t.Helper()
		chain := (owned.Owner{Name: inst}).Chain()
		rule := fmt.Sprintf("-A %s -p tcp -m multiport --dports %d", chain, wirePort)
		if err := env.cfg.Firewall.Replace(t.Context(), chain, []string{owned.InputJump(chain), rule}); err != nil {
			t.Fatal(err)
		}
		if save := wireSave(t); !strings.Contains(save, "-A INPUT -j "+chain) {
			t.Fatalf("no INPUT jump left:\n%s", save)
		}
	}
	leave(WireInstance(env.cfg.Instance))
	w, err := OpenWire(t.Context(), env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	wireAssertClean(t, "OpenWire over an older version's leftovers")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	leave("wdead")
	other := owned.NewOwnedReconciler(env.cfg.Firewall, owned.Ipsets{Handle: env.h}, "q9", env.ns)
	other6 := owned.NewV6Reconciler(&owned.Iptables{Run: env.run, V6: true}, owned.Ipsets{Handle: env.h}, "q9", env.ns)
	for _, r := range []*owned.Reconciler{other, other6} {
		if err := r.SweepDead(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	wireAssertClean(t, "another instance's sweep of the dead one")
}

func wireSave(t *testing.T) string {
	t.Helper()
	var all string
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command("ip", "netns", "exec", wireSrvNS, save, "-t", "mangle").Output()
		if err != nil {
			t.Fatal(err)
		}
		all += string(out)
	}
	return all
}

func wireAssertClean(t *testing.T, after string) {
	t.Helper()
	save := wireSave(t)
	sets, err := exec.Command("ip", "netns", "exec", wireSrvNS, "ipset", "list", "-n").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(save, "SANQOS") || strings.Contains(string(sets), "sanqos") {
		t.Errorf("%s left objects:\n%s\n%s", after, save, sets)
	}
}
