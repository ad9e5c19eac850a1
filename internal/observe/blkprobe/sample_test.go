package blkprobe

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseDiskstatsNames(t *testing.T) {
	in := "   7       0 loop0 5383 0 86128 132065 0 0 0 0 1 132032 132065 0 0 0 0 0 0\n" +
		" 254       1 vda1 1 2 3\n" +
		"\n  7 \n bad line x\n x 0 sdz\n 8 16 sdb 1 2 3 4 5 6 7 8 9 10 11\n 8 2000000 huge 0\n"
	got, err := parseDiskstatsNames(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]devNum{"loop0": {7, 0}, "vda1": {254, 1}, "sdb": {8, 16}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for n, d := range want {
		if got[n] != d {
			t.Errorf("%s: got %v, want %v", n, got[n], d)
		}
	}
	if k := (devNum{254, 1}).kernelDev(); k != 254<<20|1 {
		t.Errorf("kernel dev_t of 254:1 = %#x", k)
	}
}

func TestResolveDevices(t *testing.T) {
	table := map[string]devNum{"loop0": {7, 0}, "sda": {8, 0}}
	names, nums, err := resolveDevices([]string{"/dev/sda", "loop0", "sda"}, table)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "sda,loop0" || nums[0] != (devNum{8, 0}) || nums[1] != (devNum{7, 0}) {
		t.Errorf("got %v %v", names, nums)
	}
	for _, bad := range [][]string{nil, {"nosuch"}} {
		if _, _, err := resolveDevices(bad, table); err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("%v: err = %v, want a plain input error", bad, err)
		}
	}
}

// TestDevTable: every device is found where the BPF program searches for
// it (from devHash, the first free place ends the search), including
// devices whose hashes collide; a device given twice and a device with no
// free place among its devProbes are refused.
func TestDevTable(t *testing.T) {
	find := func(table *[devTab]devPlace, dev uint32) (uint32, bool) {
		h := devHash(dev)
		for j := uint32(0); j < devProbes; j++ {
			p := table[(h+j)&(devTab-1)]
			if p.Idx1 == 0 {
				return 0, false
			}
			if p.Dev == dev {
				return p.Idx1 - 1, true
			}
		}
		return 0, false
	}
	// Loop devices, SCSI disks and their partitions, dm and NVMe: the
	// numbers a storage target watches.
	var nums []devNum
	for m := uint32(0); m < 16; m++ {
		nums = append(nums, devNum{7, m}, devNum{8, 16 * m}, devNum{253, m}, devNum{259, m})
	}
	table, err := devTable(nums)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range nums {
		if idx, ok := find(&table, d.kernelDev()); !ok || idx != uint32(i) {
			t.Errorf("%d:%d: found %v at index %d, want %d", d.major, d.minor, ok, idx, i)
		}
	}
	for _, d := range []devNum{{8, 1}, {7, 16}, {254, 0}} {
		if _, ok := find(&table, d.kernelDev()); ok {
			t.Errorf("%d:%d was never watched but is found", d.major, d.minor)
		}
	}

	// Devices whose first places collide take the next ones.
	var same []devNum
	for minor := uint32(0); len(same) < devProbes+1 && minor < 1<<20; minor++ {
		if d := (devNum{8, minor}); devHash(d.kernelDev()) == devHash(devNum{8, 0}.kernelDev()) {
			same = append(same, d)
		}
	}
	if len(same) != devProbes+1 {
		t.Fatalf("found %d colliding devices", len(same))
	}
	table, err = devTable(same[:devProbes])
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range same[:devProbes] {
		if idx, ok := find(&table, d.kernelDev()); !ok || idx != uint32(i) {
			t.Errorf("colliding %d:%d: found %v at index %d, want %d", d.major, d.minor, ok, idx, i)
		}
	}
	if _, err := devTable(same); err == nil || !strings.Contains(err.Error(), "watch fewer devices") {
		t.Errorf("a device with no free place: err = %v", err)
	}
	if _, err := devTable([]devNum{{7, 0}, {8, 0}, {7, 0}}); err == nil || !strings.Contains(err.Error(), "7:0 given twice") {
		t.Errorf("a device given twice: err = %v", err)
	}
}

func TestSnapshotSub(t *testing.T) {
	var prev, cur Snapshot
	prev.Devices = map[string]Device{"loop0": {Name: "loop0", Read: Ops{Count: 10, Sum: time.Millisecond}, Untracked: 1}}
	cur.At = time.Unix(100, 0)
	cur.Devices = map[string]Device{
		"loop0": {Name: "loop0", Read: Ops{Count: 15, Sum: 3 * time.Millisecond}, Untracked: 4, OldestRead: 7 * time.Millisecond, ReadsInFlight: 2},
		"sda":   {Name: "sda", Write: Ops{Count: 3}},
	}
	d := cur.Sub(prev)
	l := d.Devices["loop0"]
	if l.Read.Count != 5 || l.Read.Mean() != 400*time.Microsecond || l.Untracked != 3 {
		t.Errorf("loop0 tick = %+v", l)
	}
	if l.OldestRead != 7*time.Millisecond || l.ReadsInFlight != 2 {
		t.Errorf("gauges should be the current sample's: %+v", l)
	}
	if d.Devices["sda"].Write.Count != 3 || !d.At.Equal(cur.At) {
		t.Errorf("new device not taken from zero: %+v", d)
	}
}

func TestOldest(t *testing.T) {
	s := make([]slot, slots)
	if age, n := oldest(s, 1e9); age != 0 || n != 0 {
		t.Errorf("empty: %v %d", age, n)
	}
	s[3] = slot{Rq: 1, Ts: 5e8}
	s[60] = slot{Rq: 2, Ts: 2e8}
	s[7] = slot{Rq: 3, Ts: 0} // claimed, time not yet written
	if age, n := oldest(s, 1e9); age != 800*time.Millisecond || n != 2 {
		t.Errorf("got %v %d, want 800ms from the earliest of two", age, n)
	}
	if age, _ := oldest(s, 1e8); age != 0 {
		t.Errorf("issue after the clock read gave age %v, want 0", age)
	}
}

func TestUnavailableError(t *testing.T) {
	cause := os.ErrPermission
	var err error = &UnavailableError{Reason: "no permission", Err: cause}
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, os.ErrPermission) {
		t.Errorf("%v does not match ErrUnavailable and its cause", err)
	}
	if !strings.Contains(err.Error(), "no permission") {
		t.Errorf("message %q does not say why", err)
	}
}

// TestOpenForcedFallback forces each fallback Open can take before the
// kernel is asked, and checks that bad input is not mistaken for one.
func TestOpenForcedFallback(t *testing.T) {
	base := Options{ProcRoot: "testdata"}
	disabled := base
	disabled.Disable = errors.New("--no-ebpf")
	noBTF := base
	noBTF.KernelBTF = "testdata/no-such-vmlinux"
	for name, o := range map[string]Options{"disabled": disabled, "no BTF": noBTF} {
		p, err := Open([]string{"loop0"}, o)
		if !errors.Is(err, ErrUnavailable) {
			if p != nil {
				p.Close()
			}
			t.Errorf("%s: Open err = %v, want ErrUnavailable", name, err)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	if _, err := Open([]string{"sanqos-nosuch"}, disabled); err == nil || errors.Is(err, ErrUnavailable) {
		t.Errorf("unknown device: err = %v, want an input error, not a fallback", err)
	}
}

// TestFakeTick shows the use the daemon makes of a Sampler: cumulative
// samples, one tick's delta, its mean and percentiles.
func TestFakeTick(t *testing.T) {
	f := NewFake("loop0")
	t0 := time.Unix(0, 0)
	prev, err := f.Sample(t0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 100; i++ {
		f.Complete("loop0", false, time.Duration(i)*10*time.Microsecond) // 10 µs … 1 ms
	}
	f.Complete("loop0", true, 5*time.Millisecond)
	f.SetOutstanding("loop0", 1, 30*time.Millisecond)
	cur, _ := f.Sample(t0.Add(100 * time.Millisecond))
	d := cur.Sub(prev).Devices["loop0"]
	if d.Read.Count != 100 || d.Write.Count != 1 || d.OldestRead != 30*time.Millisecond {
		t.Fatalf("tick = %+v", d)
	}
	if m := d.Read.Mean(); m != 505*time.Microsecond {
		t.Errorf("mean %v, want 505µs", m)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.95, 950 * time.Microsecond}, {0.99, 990 * time.Microsecond}} {
		got := d.Read.Quantile(c.q)
		if diff := got - c.want; diff < -c.want/16 || diff > c.want/16 {
			t.Errorf("q%v = %v, want %v ± 6.25 %%", c.q, got, c.want)
		}
	}
	f.Err = errors.New("boom")
	if _, err := f.Sample(t0); err == nil {
		t.Error("Err not returned")
	}
}
