package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/observe/mountinfo"
)

func TestParseStorage(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"emu:thesis-2010", "emu:thesis-2010", false},
		{"emu:ssd", "emu:ssd", false},
		{"emu-mem:ssd", "emu-mem:ssd", false},
		{"emu-mem:", "", true},
		{"dir:/var/tmp/x", "dir:/var/tmp/x", false},
		{"dir:/var/tmp/x/../y", "dir:/var/tmp/y", false},
		{"emu:", "", true},
		{"dir:", "", true},
		{"thesis-2010", "", true},
		{"nfs:/x", "", true},
		{"", "", true},
	} {
		got, err := ParseStorage(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseStorage(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil && got.String() != tc.want {
			t.Errorf("ParseStorage(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// The ssd profile keeps its backing files in RAM by default; the others
// on this machine's disk.
func TestDefaultStorageFor(t *testing.T) {
	for profile, want := range map[string]string{"ssd": "emu-mem:ssd", "thesis-2010": "emu:thesis-2010", "ram": "emu:ram"} {
		if got := DefaultStorageFor(profile).String(); got != want {
			t.Errorf("DefaultStorageFor(%q) = %s, want %s", profile, got, want)
		}
	}
}

// A tmpfs backing larger than the memory available is refused, with what
// to do; a small one is let through.
func TestCheckMemoryFor(t *testing.T) {
	err := checkMemoryFor(1 << 60)
	if err == nil || !strings.Contains(err.Error(), "--size") || !strings.Contains(err.Error(), "--storage emu:PROFILE") {
		t.Errorf("1 EiB in RAM: %v, want a refusal naming --size and --storage", err)
	}
	if err := checkMemoryFor(1 << 20); err != nil {
		t.Errorf("1 MiB in RAM: %v", err)
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"2GiB", 2 << 30}, {"2G", 2 << 30}, {"512MiB", 512 << 20}, {"512M", 512 << 20},
		{"4096", 4096}, {"1 GiB", 1 << 30}, {"3KiB", 3072},
		{"", -1}, {"0", -1}, {"-1G", -1}, {"1.5G", -1}, {"G", -1}, {"2XB", -1}, {"99999999999T", -1},
	} {
		got, err := ParseSize(tc.in)
		if tc.want < 0 {
			if err == nil {
				t.Errorf("ParseSize(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseLosetupJSON(t *testing.T) {
	b, err := os.ReadFile("testdata/losetup-list.json")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := parseLosetupJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	// The capture holds the lab's four loops (and whatever else the
	// machine had attached then).
	lab := 0
	for _, d := range devs {
		if !strings.HasPrefix(d.Name, "/dev/loop") {
			t.Errorf("fixture device %+v: not a loop device", d)
		}
		if isLabLoop(d) {
			lab++
			if !d.DIO {
				t.Errorf("lab loop %+v without direct I/O", d)
			}
		}
	}
	if lab != 4 {
		t.Errorf("got %d lab loop devices, want 4: %+v", lab, devs)
	}
	if devs, err := parseLosetupJSON([]byte("\n")); err != nil || devs != nil {
		t.Errorf("empty output: got %v, %v; want no devices", devs, err)
	}
	if _, err := parseLosetupJSON([]byte(`{"loopdevices": [`)); err == nil {
		t.Error("truncated output parsed without error")
	}
}

func TestIsLabLoop(t *testing.T) {
	for _, tc := range []struct {
		back string
		want bool
	}{
		{"/srv/images/sanqos-lab-b2.img", true},
		{"/srv/images/sanqos-lab-b2.img (deleted)", true},
		{DataDir + "/backing/x.img", true},
		{StateDir + "/emu/sanqos-lab-b5.img", true},
		{"/var/tmp/sanqos-lg-x/disk.img", false}, // another area's prefix
		{"/var/lib/images/vm.img", false},
		{"/var/tmp/sanqos-lab-other/x.img", false},
	} {
		if got := isLabLoop(loopDevice{BackFile: tc.back}); got != tc.want {
			t.Errorf("isLabLoop(%q) = %v, want %v", tc.back, got, tc.want)
		}
	}
}

func TestParseEthtoolK(t *testing.T) {
	b, err := os.ReadFile("testdata/ethtool-k-veth.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseEthtoolK(b)
	if err != nil {
		t.Fatal(err)
	}
	// The fixture was captured from a lab interface, which Up sets so.
	if got != wantOffloads {
		t.Errorf("offloads = %+v, want %+v", got, wantOffloads)
	}
	off := strings.NewReplacer("generic-receive-offload: on", "generic-receive-offload: off").Replace(string(b))
	if got, err := parseEthtoolK([]byte(off)); err != nil || got.GRO || !got.TSO {
		t.Errorf("with gro off: %+v, %v", got, err)
	}
	if _, err := parseEthtoolK([]byte("Features for eth0:\nrx-checksumming: on\n")); err == nil {
		t.Error("output without offload lines parsed without error")
	}
}

func TestCountTargets(t *testing.T) {
	b, err := os.ReadFile("testdata/tgtadm-target-show.txt")
	if err != nil {
		t.Fatal(err)
	}
	if n := countTargets(b); n != 4 {
		t.Errorf("countTargets = %d, want 4", n)
	}
	if n := countTargets(nil); n != 0 {
		t.Errorf("countTargets(empty) = %d", n)
	}
}

func TestParseLabMounts(t *testing.T) {
	in := `22 1 0:21 / /run rw - tmpfs tmpfs rw
95 22 0:48 / /run/sanqos-lab/emu rw,nosuid - fuse.sanqos-diskemu sanqos-diskemu rw
96 95 0:49 / /run/sanqos-lab/emu/sub\040dir rw - tmpfs tmpfs rw
97 22 0:50 / /run/sanqos-lab-other rw - tmpfs tmpfs rw
98 1 0:51 / /var/tmp/sanqos-lab/backing rw - tmpfs tmpfs rw
`
	mounts, err := mountinfo.Parse(strings.NewReader(in), "fixture")
	if err != nil {
		t.Fatal(err)
	}
	got := labMountPoints(mounts)
	want := []string{"/var/tmp/sanqos-lab/backing", "/run/sanqos-lab/emu/sub dir", "/run/sanqos-lab/emu"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("labMountPoints = %q, want %q", got, want)
	}
}

func TestCheckTools(t *testing.T) {
	all := func(string) (string, error) { return "/usr/bin/x", nil }
	if err := checkTools(all); err != nil {
		t.Errorf("all tools present: %v", err)
	}
	noTgt := func(c string) (string, error) {
		if c == "tgtd" || c == "tgtadm" {
			return "", errors.New("not found")
		}
		return "/usr/bin/" + c, nil
	}
	err := checkTools(noTgt)
	if err == nil || !strings.Contains(err.Error(), "apt-get install tgt'") || !strings.Contains(err.Error(), "tgtd, tgtadm") {
		t.Errorf("without tgt: %v; want one error naming tgtd, tgtadm and 'apt-get install tgt'", err)
	}
}

// recorder is a runner that records commands and fails the one whose
// command line contains failOn.
type recorder struct {
	cmds   []string
	failOn string
}

func (r *recorder) run(_ context.Context, name string, args ...string) ([]byte, error) {
	line := name + " " + strings.Join(args, " ")
	r.cmds = append(r.cmds, line)
	if r.failOn != "" && strings.Contains(line, r.failOn) {
		return nil, errors.New("exit status 2")
	}
	return nil, nil
}

func TestSetupNetworkCommands(t *testing.T) {
	r := &recorder{}
	hosts := []host{{TargetNS, TargetAddr}, {"sanqos-b2", initiatorAddr(0)}}
	if err := setupNetwork(context.Background(), r, hosts); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(r.cmds, "\n")
	for _, want := range []string{
		"ip netns add sanqos-sw",
		"ip -n sanqos-sw link add sqbr0 mtu 1500 type bridge",
		"ip -n sanqos-sw link add sq-bm mtu 1500 type veth peer name eth0 mtu 1500 netns sanqos-bm",
		"ip -n sanqos-bm addr add 10.213.0.253/24 dev eth0",
		"ip -n sanqos-b2 addr add 10.213.0.242/24 dev eth0",
		"ip netns exec sanqos-b2 ethtool -K eth0 tso on gso on gro on",
		"ip netns exec sanqos-bm sysctl -q -w net.ipv4.tcp_congestion_control=reno",
		"ip netns exec sanqos-sw ethtool -K sq-b2 tso on gso on gro on",
		"ip netns exec sanqos-sw sh -c for q in /sys/class/net/sq-b2/queues/rx-*/rps_cpus; do echo " + cpuMask(runtime.NumCPU()) + " > $q; done",
		"ip netns exec sanqos-b2 sh -c for q in /sys/class/net/eth0/queues/rx-*/rps_cpus; do echo " + cpuMask(runtime.NumCPU()) + " > $q; done",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("missing command %q in:\n%s", want, all)
		}
	}
	// Nothing may be created outside the lab's namespaces.
	for _, c := range r.cmds {
		if strings.HasPrefix(c, "ip link") || strings.HasPrefix(c, "ip addr") {
			t.Errorf("command touches the host namespace: %s", c)
		}
	}
	// A failure stops setup and says what was being done.
	r = &recorder{failOn: "type bridge"}
	err := setupNetwork(context.Background(), r, hosts)
	if err == nil || !strings.Contains(err.Error(), "setting up the lab network") {
		t.Errorf("error = %v", err)
	}
	if last := r.cmds[len(r.cmds)-1]; !strings.Contains(last, "type bridge") {
		t.Errorf("setup went on after a failure: last command %q", last)
	}
}

func TestCPUMask(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{1, "00000001"}, {2, "00000003"}, {32, "ffffffff"}, {33, "00000001,ffffffff"}, {64, "ffffffff,ffffffff"}} {
		if got := cpuMask(tc.n); got != tc.want {
			t.Errorf("cpuMask(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestConfigureTargetsCommands(t *testing.T) {
	r := &recorder{}
	inits := []Initiator{
		{Name: "b2", IP: initiatorAddr(0), IQN: IQNPrefix + "b2", Loop: "loop7"},
		{Name: "b3", IP: initiatorAddr(1), IQN: IQNPrefix + "b3", Loop: "loop8"},
	}
	if err := configureTargets(context.Background(), r, inits); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"tgtadm -C 2601 --lld iscsi --mode target --op new --tid 1 --targetname iqn.2010-05.sanqos.lab:b2",
		"tgtadm -C 2601 --lld iscsi --mode logicalunit --op new --tid 1 --lun 1 --backing-store /dev/loop7 --bstype rdwr --bsoflags direct",
		"tgtadm -C 2601 --lld iscsi --mode target --op bind --tid 1 --initiator-address 10.213.0.242",
		"tgtadm -C 2601 --lld iscsi --mode target --op new --tid 2 --targetname iqn.2010-05.sanqos.lab:b3",
		"tgtadm -C 2601 --lld iscsi --mode logicalunit --op new --tid 2 --lun 1 --backing-store /dev/loop8 --bstype rdwr --bsoflags direct",
		"tgtadm -C 2601 --lld iscsi --mode target --op bind --tid 2 --initiator-address 10.213.0.243",
	}
	if got := strings.Join(r.cmds, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("commands:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

func TestCreateImageIsSparseAndKeepsData(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", imageName("b2"))
	if err := createImage(p, 1<<30); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Size() != 1<<30 {
		t.Fatalf("image %v, %v; want 1 GiB", fi, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("kept"), 4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := createImage(p, 1<<30); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	f, _ = os.Open(p)
	defer f.Close()
	if _, err := f.ReadAt(b, 4096); err != nil || string(b) != "kept" {
		t.Errorf("re-creating the image lost its data: %q, %v", b, err)
	}
}

func TestProgressCountsDown(t *testing.T) {
	var b strings.Builder
	p := &progress{w: &b, phases: []phase{{"a", 2e9}, {"b", 1e9}}}
	p.next()
	p.next()
	want := "lab up: [1/2] a (about 3s left)\nlab up: [2/2] b (about 1s left)\n"
	if b.String() != want {
		t.Errorf("progress:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestParseSNMP(t *testing.T) {
	b, err := os.ReadFile("testdata/proc-net-snmp.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseSNMP(b)
	if err != nil {
		t.Fatal(err)
	}
	// Captured in the target namespace after the end-to-end test's loads.
	if got.InSegs == 0 || got.OutSegs == 0 {
		t.Errorf("parseSNMP = %+v, want the fixture's nonzero counters", got)
	}
	for _, bad := range []string{
		"",
		"Tcp: InSegs OutSegs RetransSegs\n",
		"Tcp: InSegs OutSegs RetransSegs\nTcp: 1 2\n",
		"Tcp: InSegs OutSegs RetransSegs\nTcp: 1 x 3\n",
		"Tcp: InSegs OutSegs\nTcp: 1 2\n",
	} {
		if _, err := parseSNMP([]byte(bad)); err == nil {
			t.Errorf("parseSNMP(%q) succeeded", bad)
		}
	}
	if got, err := parseSNMP([]byte("Ip: a\nIp: 1\nTcp: RetransSegs InSegs OutSegs\nTcp: 3 1 2\n")); err != nil || got != (TCPStats{1, 2, 3}) {
		t.Errorf("columns by name: %+v, %v", got, err)
	}
}

func TestLockIsExclusiveAndReleased(t *testing.T) {
	a, err := tryLock()
	if errors.Is(err, ErrInUse) {
		t.Skip("a lab is in use on this machine right now")
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tryLock(); !errors.Is(err, ErrInUse) {
		t.Fatalf("second lock: %v, want ErrInUse", err)
	}
	if err := Cleanup(context.Background()); !errors.Is(err, ErrInUse) {
		t.Fatalf("Cleanup while the lab is held: %v, want ErrInUse", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	var msg strings.Builder
	if _, err := lock(ctx, &msg); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(msg.String(), "waiting") {
		t.Fatalf("lock while held: %v (said %q), want to wait and say so", err, msg.String())
	}
	a.release()
	b, err := tryLock()
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	b.release()
}
