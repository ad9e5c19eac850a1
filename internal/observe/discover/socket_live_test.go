package discover

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/observe/topology"
)

// Live test of the socket adapter: network namespace sanqos-w17-dl, a
// qemu-nbd serving an image from /tmp/sanqos-w17-dl-*, and qemu-io
// connected to it, both on the namespace's loopback.
const socketLiveNS = "sanqos-w17-dl"

func cleanSocketLive() {
	if out, err := exec.Command("ip", "netns", "pids", socketLiveNS).Output(); err == nil {
		for _, pid := range strings.Fields(string(out)) {
			_ = exec.Command("kill", "-9", pid).Run()
		}
	}
	_ = exec.Command("ip", "netns", "del", socketLiveNS).Run()
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), "sanqos-w17-dl-*"))
	for _, d := range old {
		_ = os.RemoveAll(d)
	}
}

func TestSocketLive(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	for _, b := range []string{"qemu-nbd", "qemu-io", "qemu-img"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs %s (apt-get install qemu-utils)", b)
		}
	}
	cleanSocketLive()
	t.Cleanup(cleanSocketLive)
	dir, err := os.MkdirTemp("", "sanqos-w17-dl-")
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "disk.img")
	for _, c := range [][]string{
		{"qemu-img", "create", "-f", "raw", img, "16M"},
		{"ip", "netns", "add", socketLiveNS},
		{"ip", "-n", socketLiveNS, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
	srv := exec.Command("ip", "netns", "exec", socketLiveNS, "qemu-nbd", "-f", "raw", "--bind", "127.0.0.1", "--port", "10809", "--persistent", img)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	time.Sleep(500 * time.Millisecond)
	cli := exec.Command("ip", "netns", "exec", socketLiveNS, "qemu-io", "-f", "raw", "nbd://127.0.0.1:10809", "-c", "write 0 64k", "-c", "sleep 20000")
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Process.Kill(); _ = cli.Wait() })

	s, err := NewSocket(SocketConfig{Ports: []int{10809}, Linger: time.Second, netOf: strconv.Itoa(srv.Process.Pid)})
	if err != nil {
		t.Fatal(err)
	}
	var atts []Attachment
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if atts, err = s.Attachments(t.Context()); err == nil && len(atts) > 0 {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	// "ip netns exec" gives qemu-nbd a mount namespace of its own (it
	// remounts /sys), so the image is named by the device holding it.
	want, err := topology.DefaultResolver().Resolve(img)
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 1 || atts[0].Addr.String() != "127.0.0.1" || atts[0].Backing != want.Device || atts[0].Target != "qemu-nbd:10809" {
		t.Fatalf("attachments %+v, want 127.0.0.1 using %s (holding %s) of qemu-nbd:10809", atts, want.Device, img)
	}
	topo, err := New(s, topology.DefaultResolver(), nil).Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Resources) != 1 || len(topo.Resources[0].Consumers) != 1 || topo.Resources[0].Consumers[0].Device == "" {
		t.Fatalf("topology %+v: want one resource with the client on the image's device", topo)
	}
	t.Logf("discovered %s on %s: resource %s", atts[0].Addr, topo.Resources[0].Consumers[0].Device, topo.Resources[0].Name)

	// The client leaves: it lingers for a second, then is gone.
	_ = cli.Process.Kill()
	_ = cli.Wait()
	if atts, err = s.Attachments(t.Context()); err != nil || len(atts) != 1 {
		t.Errorf("right after the client left: %+v, %v; want it lingering", atts, err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if atts, err = s.Attachments(t.Context()); err == nil && len(atts) == 0 {
			break
		}
	}
	if err != nil || len(atts) != 0 {
		t.Errorf("after the client left: %+v, %v; want none", atts, err)
	}
}
