package guesttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/vm"
	"github.com/sanqos/sanqos/internal/lab/vm/kstack"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// The systemd suite: the guest boots with systemd as PID 1, the shipped
// unit (deploy/sanqos.service) is installed unchanged as GuestUnit, the
// binary where its ExecStart says, and the tests drive sanqos only with
// systemctl and a configuration in /etc/sanqos/sanqos.toml: what its
// sandbox and capabilities let the daemon do is what these tests see.
//
// One drop-in is added: NetworkNamespacePath, because the lab's target
// (LIO, and ganesha here) lives in a network namespace of its own (see
// kstack) while an administrator's target is usually the host's. It
// changes where the daemon acts, not what it may do.

const (
	unitName   = "sanqos.service"
	configPath = "/etc/sanqos/sanqos.toml"
	// recordPath is under the unit's LogsDirectory: /tmp is private to it.
	recordPath = "/var/log/sanqos/lab-ticks.jsonl"
	dropInPath = "/etc/systemd/system/sanqos.service.d/lab-netns.conf"
	// threshold is under VG0's dm-delay floor (kstack DelayMs 5): VG0 is
	// over threshold for as long as it is read.
	threshold = "2500us"
)

// underSystemd skips unless PID 1 is systemd (the systemd boot of the
// kernel lab).
func underSystemd(t *testing.T) {
	t.Helper()
	inGuest(t)
	comm, _ := os.ReadFile("/proc/1/comm")
	if strings.TrimSpace(string(comm)) != "systemd" {
		t.Skip("runs only in the kernel lab's systemd boot (suite systemd)")
	}
}

// systemctl runs systemctl and fails the test with the daemon's journal
// if it fails.
func systemctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("systemctl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("systemctl %s: %v\n%s\njournal of sanqos:\n%s", strings.Join(args, " "), err, out, journal(t, ""))
	}
	return string(out)
}

// show returns one property of the unit.
func show(t *testing.T, prop string) string {
	t.Helper()
	return strings.TrimSpace(systemctl(t, "show", "-p", prop, "--value", unitName))
}

// journal returns the daemon's journal, since a time ("" for all).
func journal(t *testing.T, since string) string {
	t.Helper()
	args := []string{"-u", unitName, "-o", "cat", "--no-pager"}
	if since != "" {
		args = append(args, "--since", since)
	}
	out, _ := exec.Command("journalctl", args...).CombinedOutput()
	return lastLines(string(out), 60)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// journalStamp is a --since time for journalctl.
func journalStamp(t time.Time) string { return t.Format("2006-01-02 15:04:05") }

// labConfig is the daemon's configuration: the shipped defaults but for
// the adapter, the port, a threshold under VG0's floor, a quick
// discovery and a record of every tick.
func labConfig(adapter string, port int, extra string) string {
	return fmt.Sprintf(`# kernel lab, suite systemd
threshold = %q
backend = "nfqueue"
ports = [%d]
listen = "127.0.0.1:9469"
socket = "/run/sanqos/sanqos.sock"
record = %q

[discovery]
adapter = %q
interval = "1s"
%s`, threshold, port, recordPath, adapter, extra)
}

func writeConfig(t *testing.T, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(configPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(configPath, []byte(text), 0o640); err != nil {
		t.Fatal(err)
	}
}

// inTargetNS puts the unit in the target's network namespace (a drop-in;
// the unit file stays as shipped).
func inTargetNS(t *testing.T) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dropInPath), 0o755); err != nil {
		t.Fatal(err)
	}
	text := "# kernel lab: the target lives in its own network namespace\n[Service]\nNetworkNamespacePath=/run/netns/" + kstack.TargetNS + "\n"
	if err := os.WriteFile(dropInPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	systemctl(t, "daemon-reload")
}

// waitTick waits up to d for a tick of the record for which ok holds,
// and returns it; it fails with the last tick and the journal.
func waitTick(t *testing.T, d time.Duration, what string, ok func(status.Record) bool) status.Record {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		k, have := lastTick(t, recordPath)
		if have && ok(k) {
			return k
		}
		if time.Now().After(deadline) {
			t.Fatalf("within %v: %s; last tick (recorded: %v): %+v\njournal of sanqos:\n%s", d, what, have, k, journal(t, ""))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func resource(k status.Record, name string) (status.RecordResource, bool) {
	for _, r := range k.Resources {
		if r.Name == name {
			return r, true
		}
	}
	return status.RecordResource{}, false
}

// consumerAt reports whether the tick has a consumer of the address on
// the resource.
func consumerAt(k status.Record, addr, res string) bool {
	for _, c := range k.Consumers {
		if c.Addr == addr && c.Resource == res {
			return true
		}
	}
	return false
}

// TestSystemdUnitAsShipped: systemd loads the shipped unit from
// /etc/systemd/system, its [Install] section enables it, and the binary
// is where ExecStart says.
func TestSystemdUnitAsShipped(t *testing.T) {
	underSystemd(t)
	if p := show(t, "FragmentPath"); p != vm.GuestUnit {
		t.Errorf("FragmentPath %q, want %s", p, vm.GuestUnit)
	}
	if s := show(t, "LoadState"); s != "loaded" {
		t.Errorf("LoadState %q", s)
	}
	if fi, err := os.Stat(vm.GuestSbin); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("the unit's binary %s: %v", vm.GuestSbin, err)
	}
	out, err := exec.Command("systemd-analyze", "verify", vm.GuestUnit).CombinedOutput()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// tgt is not installed in the guest (it runs LIO).
		if l != "" && !strings.Contains(l, "tgt.service") {
			t.Errorf("systemd-analyze verify: %s", l)
		}
	}
	if err != nil && !strings.Contains(string(out), "tgt.service") {
		t.Errorf("systemd-analyze verify: %v", err)
	}
	systemctl(t, "enable", unitName)
	if s := strings.TrimSpace(systemctl(t, "is-enabled", unitName)); s != "enabled" {
		t.Errorf("after enable: %s", s)
	}
	systemctl(t, "disable", unitName)
}

// TestSystemdLIO starts the unit on the LIO stack: the daemon discovers
// the sessions and resolves each LUN through LVM and device-mapper
// (/dev/mapper and /dev/<vg> links, sysfs) under ProtectSystem=strict,
// DevicePolicy=closed and the rest of the sandbox, and throttles the
// writer of the resource over threshold.
func TestSystemdLIO(t *testing.T) {
	underSystemd(t)
	s := stack(t)
	inTargetNS(t)
	writer, reader := s.Initiators[0], s.Initiators[1]
	wDisk := diskOf(t, s, writer, 1) // lun2 on VG0
	rDisk := diskOf(t, s, reader, 0) // lun1 on VG0
	load := startLoad(t, wDisk, rDisk)
	defer load.stop()
	time.Sleep(3 * time.Second)
	before, n := load.window(2 * time.Second)
	t.Logf("writer alone with the reader: minimum write latency %v over %d writes", before, n)

	writeConfig(t, labConfig("lio", kstack.Port, ""))
	os.Remove(recordPath)
	systemctl(t, "start", unitName) // Type=notify: returns at READY=1
	if a := show(t, "ActiveState"); a != "active" {
		t.Fatalf("after start: %s\n%s", a, journal(t, ""))
	}

	t.Run("discovers the LVM resources", func(t *testing.T) {
		vg0, vg1 := "vg-"+kstack.VG0, "vg-"+kstack.VG1
		k := waitTick(t, 30*time.Second, "both initiators on "+vg1+" and each on "+vg0, func(k status.Record) bool {
			for _, in := range s.Initiators {
				if !consumerAt(k, in.IP, vg0) || !consumerAt(k, in.IP, vg1) {
					return false
				}
			}
			return true
		})
		if len(k.Resources) != 2 {
			t.Errorf("resources %+v, want %s and %s only (LUNs resolved through dm to their VG)", k.Resources, vg0, vg1)
		}
	})

	t.Run("throttles the writer", func(t *testing.T) {
		var during time.Duration
		k := waitTick(t, 40*time.Second, "the writer delayed on vg-"+kstack.VG0, func(k status.Record) bool {
			during, n = load.window(time.Second)
			return n > 0 && during > before+5*time.Millisecond && delayed(k, "vg-"+kstack.VG0)
		})
		t.Logf("under the unit: minimum write latency %v (before %v)", during, before)
		if r, _ := resource(k, "vg-"+kstack.VG0); r.Members != 1 {
			t.Errorf("vg-%s: %d throttleable consumers, want the writer alone", kstack.VG0, r.Members)
		}
	})
	t.Run("runs its packet thread real-time", func(t *testing.T) {
		if runtime.NumCPU() < 2 {
			t.Skip("one CPU: the daemon runs no real-time thread (boot with --smp 2)")
		}
		// SCHED_FIFO needs CAP_SYS_NICE and sched_setscheduler through
		// the system call filter, and no RestrictRealtime.
		if n := fifoThreads(t, show(t, "MainPID")); n == 0 {
			t.Errorf("no SCHED_FIFO thread in the daemon under the unit\n%s", journal(t, ""))
		}
	})
	if j := journal(t, ""); strings.Contains(j, "level=ERROR") {
		t.Errorf("errors in the journal:\n%s", j)
	}
	// UMask=0027: the record names the consumers.
	if fi, err := os.Stat(recordPath); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm()&0o007 != 0 {
		t.Errorf("the record %s has mode %v: want no access for others (UMask=0027)", recordPath, fi.Mode().Perm())
	}
}

// fifoThreads counts the threads of process pid scheduled SCHED_FIFO
// (policy, field 41 of /proc/PID/task/TID/stat).
func fifoThreads(t *testing.T, pid string) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/" + pid + "/task/*/stat")
	if err != nil || len(stats) == 0 {
		t.Fatalf("threads of %s: %v", pid, err)
	}
	n := 0
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // from field 3
		if len(f) > 38 && f[38] == "1" {
			n++
		}
	}
	return n
}

// TestSystemdReload: 'systemctl reload' applies a good file and refuses
// a bad one, failing (ExecReload checks the file first) while the daemon
// goes on with the configuration it has; a SIGHUP that bypasses the
// check is refused by the daemon itself.
func TestSystemdReload(t *testing.T) {
	underSystemd(t)
	if show(t, "ActiveState") != "active" {
		t.Skip("sanqos is not running (TestSystemdLIO failed)")
	}
	pid := show(t, "MainPID")
	vg1 := "vg-" + kstack.VG1
	good := labConfig("lio", kstack.Port, fmt.Sprintf("\n[resources.%q]\nthreshold = \"40ms\"\n", vg1))
	writeConfig(t, good)
	systemctl(t, "reload", unitName)
	waitTick(t, 20*time.Second, vg1+" at the reloaded 40 ms threshold", func(k status.Record) bool {
		r, ok := resource(k, vg1)
		return ok && r.ThresholdMs == 40
	})

	bad := strings.Replace(good, "threshold = \""+threshold+"\"", "threshold = \"fast\"", 1)
	writeConfig(t, bad)
	since := time.Now()
	out, err := exec.Command("systemctl", "reload", unitName).CombinedOutput()
	if err == nil {
		t.Errorf("systemctl reload with a bad file succeeded: %s", out)
	}
	// systemctl says to look at the journal; the check's error is there.
	time.Sleep(time.Second)
	if j := journal(t, journalStamp(since)); !strings.Contains(j, "fast") {
		t.Errorf("the journal does not say why the reload failed:\n%s", j)
	}
	if p := show(t, "MainPID"); p != pid || show(t, "ActiveState") != "active" {
		t.Fatalf("after a refused reload: MainPID %s (was %s), %s", p, pid, show(t, "ActiveState"))
	}
	last, _ := lastTick(t, recordPath)
	waitTick(t, 10*time.Second, "ticks going on at the 40 ms threshold after the refused reload", func(k status.Record) bool {
		r, ok := resource(k, vg1)
		return ok && r.ThresholdMs == 40 && k.T.After(last.T)
	})

	// The daemon's own guard: a SIGHUP with the bad file in place.
	since = time.Now()
	systemctl(t, "kill", "-s", "HUP", "--kill-whom=main", unitName)
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(journal(t, journalStamp(since)), "configuration refused") {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal logged after SIGHUP with a bad file:\n%s", journal(t, ""))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if p := show(t, "MainPID"); p != pid || show(t, "ActiveState") != "active" {
		t.Fatalf("after SIGHUP with a bad file: MainPID %s (was %s), %s", p, pid, show(t, "ActiveState"))
	}
	writeConfig(t, labConfig("lio", kstack.Port, ""))
	systemctl(t, "reload", unitName)
}

// TestSystemdKill: SIGKILL to the daemon leaves its rules; ExecStopPost
// removes them, Restart=on-failure starts it again, and a stop leaves
// nothing: no rule, set, qdisc, process or runtime directory.
func TestSystemdKill(t *testing.T) {
	underSystemd(t)
	if show(t, "ActiveState") != "active" {
		t.Skip("sanqos is not running (TestSystemdLIO failed)")
	}
	// Nothing of sanqos is on the path while nobody is throttled: a
	// manual throttle puts its rules there for the kill to leave behind.
	writer := stack(t).Initiators[0]
	if out, err := exec.Command(vm.GuestBin, "throttle", "--socket", "/run/sanqos/sanqos.sock", "--ip", writer.IP,
		"--delay", "20ms", "--direction", "write").CombinedOutput(); err != nil {
		t.Fatalf("manual throttle: %v: %s", err, out)
	}
	var r string
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if r = runTarget(t, "iptables-save"); strings.Contains(strings.ToLower(r), "sanqos") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no sanqos rules 5 s after a manual throttle: the clean-up below would prove nothing\n%s", r)
		}
	}
	pid := show(t, "MainPID")
	restarts, _ := strconv.Atoi(show(t, "NRestarts"))
	killed := time.Now()
	systemctl(t, "kill", "-s", "KILL", unitName)
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, _ := strconv.Atoi(show(t, "NRestarts"))
		p := show(t, "MainPID")
		if n > restarts && p != pid && p != "0" && show(t, "ActiveState") == "active" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not restarted within 60 s of SIGKILL: NRestarts %d, MainPID %s (was %s), %s\n%s", n, p, pid, show(t, "ActiveState"), journal(t, ""))
		}
		time.Sleep(300 * time.Millisecond)
	}
	// ExecStopPost ran after the kill ('sanqos run --cleanup-only' alone
	// says this; systemd forgets its exit status at the restart).
	if j := journal(t, journalStamp(killed)); !strings.Contains(j, "leftovers removed") {
		t.Errorf("ExecStopPost did not say it removed the leftovers:\n%s", j)
	}
	// The restarted daemon ticks.
	last, _ := lastTick(t, recordPath)
	waitTick(t, 20*time.Second, "ticks from the restarted daemon", func(k status.Record) bool { return k.T.After(last.T) })

	stop(t)
	assertClean(t)
	if out, err := exec.Command("pgrep", "-x", "sanqos").CombinedOutput(); err == nil {
		t.Errorf("sanqos processes left after stop: %s", out)
	}
	if _, err := os.Stat("/run/sanqos"); err == nil {
		t.Error("/run/sanqos left after stop (RuntimeDirectory)")
	}
	systemctl(t, "start", unitName)
	if a := show(t, "ActiveState"); a != "active" {
		t.Fatalf("start after stop: %s", a)
	}
}

// stop stops the unit. What the daemon leaves, ExecStopPost removes; the
// tests assert that (assertClean). The daemon's own removal on SIGTERM
// must succeed too: it failed at every stop here with "CHAIN_DEL failed
// (Device or resource busy)" or "destroying ipset ...: busy" before
// deletion retried while nf_tables frees what a deleted rule held (audit
// round 2, N9), and that marked the unit failed.
func stop(t *testing.T) {
	t.Helper()
	since := time.Now()
	systemctl(t, "stop", unitName)
	if r := show(t, "Result"); r != "success" {
		t.Errorf("the daemon's own clean-up on SIGTERM failed (Result=%s), ExecStopPost removed the rest:\n%s", r, journal(t, journalStamp(since)))
	}
}

// NFS: nfs-ganesha (FSAL VFS) in the target's namespace, started by
// systemd as the distribution's unit would (root, every capability),
// exporting an ext4 file system on an LV of VG1; a kernel NFSv4 client
// in a namespace of its own, bridged to the target.
const (
	nfsExport   = "/srv/sanqos-nfs"
	nfsMount    = "/mnt/sanqos-nfs"
	nfsClientNS = "sanqos-nfsc"
	nfsClientIP = "10.77.0.30"
	nfsLV       = "nfs"
	ganeshaUnit = "sanqos-lab-ganesha.service"
	ganeshaConf = "/etc/ganesha/sanqos-lab.conf"
)

// run runs a command and fails the test with its output if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DM_DISABLE_UDEV=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestSystemdNFS: the socket adapter, under the unit's capabilities,
// finds ganesha behind port 2049, its export, and the NFS client, and
// resolves the export to VG1.
func TestSystemdNFS(t *testing.T) {
	underSystemd(t)
	stack(t)
	inTargetNS(t)
	ctx := context.Background()
	dev := "/dev/mapper/" + strings.ReplaceAll(kstack.VG1, "-", "--") + "-" + nfsLV
	if _, err := kstack.LVM(ctx, "lvcreate", "-qq", "-y", "-Wn", "-Zn", "-L", "32M", "-n", nfsLV, kstack.VG1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kstack.LVM(ctx, "lvremove", "-qq", "-y", kstack.VG1+"/"+nfsLV) })
	run(t, "mkfs.ext4", "-q", "-F", "-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1", dev)
	os.MkdirAll(nfsExport, 0o755)
	run(t, "mount", dev, nfsExport)
	t.Cleanup(func() { exec.Command("umount", nfsExport).Run() })

	conf := fmt.Sprintf(`NFS_CORE_PARAM { Protocols = 4; NFS_Port = 2049; Enable_NLM = false; Enable_RQUOTA = false; }
NFSV4 { Graceless = true; }
EXPORT {
	Export_Id = 1; Path = %s; Pseudo = /sanqos;
	Access_Type = RW; Squash = No_Root_Squash; Protocols = 4; Transports = TCP; SecType = sys;
	FSAL { Name = VFS; }
}
`, nfsExport)
	os.MkdirAll(filepath.Dir(ganeshaConf), 0o755)
	if err := os.WriteFile(ganeshaConf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "systemd-run", "--unit", ganeshaUnit, "-p", "NetworkNamespacePath=/run/netns/"+kstack.TargetNS,
		"/usr/bin/ganesha.nfsd", "-F", "-f", ganeshaConf, "-L", "/var/log/sanqos-lab-ganesha.log", "-p", "/run/sanqos-lab-ganesha.pid")
	t.Cleanup(func() { exec.Command("systemctl", "stop", ganeshaUnit).Run() })
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(runTarget(t, "cat", "/proc/net/tcp", "/proc/net/tcp6"), ":0801 00000000000000000000000000000000:0000 0A") &&
		!strings.Contains(runTarget(t, "cat", "/proc/net/tcp"), ":0801 00000000:0000 0A") {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile("/var/log/sanqos-lab-ganesha.log")
			st, _ := exec.Command("systemctl", "status", "--no-pager", ganeshaUnit).CombinedOutput()
			t.Fatalf("ganesha does not listen on 2049 after 60 s:\n%s\n%s", st, lastLines(string(log), 30))
		}
		time.Sleep(time.Second)
	}

	// The client's namespace, bridged to the target like the initiators.
	for _, c := range [][]string{
		{"ip", "netns", "add", nfsClientNS},
		{"ip", "link", "add", "sanqos-n1", "type", "veth", "peer", "name", "pn1", "netns", kstack.TargetNS},
		{"ip", "link", "set", "sanqos-n1", "netns", nfsClientNS},
		{"ip", "-n", kstack.TargetNS, "link", "set", "pn1", "master", kstack.Bridge, "up"},
		{"ip", "-n", nfsClientNS, "addr", "add", nfsClientIP + "/24", "dev", "sanqos-n1"},
		{"ip", "-n", nfsClientNS, "link", "set", "sanqos-n1", "up"},
		{"ip", "-n", nfsClientNS, "link", "set", "lo", "up"},
	} {
		run(t, c[0], c[1:]...)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nfsClientNS).Run() })
	os.MkdirAll(nfsMount, 0o755)
	// nsenter --net only: the mount is the initial namespace's, its
	// socket the client namespace's.
	run(t, "nsenter", "--net=/run/netns/"+nfsClientNS, "--", "mount", "-t", "nfs4", "-o", "vers=4.1,proto=tcp",
		kstack.TargetIP+":/sanqos", nfsMount)
	t.Cleanup(func() { exec.Command("umount", "-f", nfsMount).Run() })
	if err := os.WriteFile(filepath.Join(nfsMount, "hello"), bytes.Repeat([]byte("x"), 1<<20), 0o644); err != nil {
		t.Fatalf("writing over NFS: %v", err)
	}

	writeConfig(t, labConfig("socket", 2049, ""))
	since := time.Now()
	systemctl(t, "restart", unitName)
	vg1 := "vg-" + kstack.VG1
	waitTick(t, 40*time.Second, "the NFS client "+nfsClientIP+" a consumer of "+vg1, func(k status.Record) bool {
		return consumerAt(k, nfsClientIP, vg1)
	})
	if j := journal(t, journalStamp(since)); strings.Contains(j, "knfsd") || strings.Contains(j, "CAP_SYS_PTRACE") {
		t.Errorf("discovery failed on the way:\n%s", j)
	}
	stop(t)
	assertClean(t)
}

// TestSystemdDeb installs, upgrades, removes and purges the package
// under systemd: first with test-cycle.sh as an administrator would run
// it (the shipped configuration), then step by step with the LIO stack,
// looking at the journal, 'sanqos check' and what each step leaves.
func TestSystemdDeb(t *testing.T) {
	underSystemd(t)
	first := filepath.Join(vm.GuestDebDir, vm.DebFirst)
	next := filepath.Join(vm.GuestDebDir, vm.DebNext)
	if _, err := os.Stat(first); err != nil {
		t.Skip("no package in the guest: make kernel-lab SUITE=systemd builds one (sanqos lab vm --deb)")
	}
	suiteUnitAside(t)
	v1, v2 := debVersion(t, first), debVersion(t, next)
	t.Logf("packages %s and %s", v1, v2)

	t.Run("test-cycle.sh", func(t *testing.T) {
		// It costs a minute under emulation and checks less than the
		// steps below: suite deb runs it, systemd and all do not.
		if os.Getenv(vm.GuestSuiteEnv) != "deb" {
			t.Skip("runs in suite deb (make kernel-lab SUITE=deb); the steps below check what it does and more")
		}
		script := filepath.Join(vm.GuestDebDir, vm.DebCycle)
		if _, err := os.Stat(script); err != nil {
			t.Skip("test-cycle.sh is not in the guest (sanqos lab vm --deb-cycle)")
		}
		out, err := exec.Command("sh", script, first, next).CombinedOutput()
		t.Logf("test-cycle.sh:\n%s", strings.TrimSpace(string(out)))
		if err != nil {
			t.Errorf("test-cycle.sh %s %s: %v\njournal of sanqos:\n%s", v1, v2, err, journal(t, ""))
		}
		// With systemd running it must have checked the service too.
		if !strings.Contains(string(out), "PASS") {
			t.Errorf("test-cycle.sh did not pass")
		}
		if r := run(t, "iptables-save"); strings.Contains(strings.ToLower(r), "sanqos") {
			t.Errorf("iptables rules or chains left after the purge:\n%s", r)
		}
	})
	if pkgStatus() != "" {
		exec.Command("dpkg", "-P", "sanqos").Run()
	}

	t.Run("step by step", func(t *testing.T) { debSteps(t, first, next, v1, v2) })
}
