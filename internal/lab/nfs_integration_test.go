package lab

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sanqos/sanqos/internal/lab/iolog"
)

// TestNFSLab brings the lab up with its NFS target, runs a few seconds of
// NFS load from b2 (smalljob's reads) and b3 (two sequential writers) and
// a job on a file it must create, checks their per-I/O logs, and then
// leaves the lab as a crashed run would (released, not taken down): the
// next clean-up must remove ganesha, rpcbind, the export's mount and its
// loop device with the rest. About 40 s.
func TestNFSLab(t *testing.T) {
	requireLab(t)
	if err := checkNFSEnv(exec.LookPath); err != nil {
		t.Skipf("NFS lab: %v", err)
	}
	loadgen := buildLoadgen(t)
	ctx := context.Background()
	l, err := Up(ctx, Options{Storage: testStorage(t), Size: 64 << 20, Loadgen: loadgen, NFS: true, Progress: testLog{t}})
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	st := l.State()
	pids := []int{readPid(ganeshaPidFile()), readPid(rpcbindPidFile()), readPid(tgtdPidFile())}
	nets := labNets(t)
	crashed := false
	t.Cleanup(func() {
		if !crashed {
			if err := l.Down(); err != nil {
				t.Errorf("lab down: %v", err)
			}
		}
		assertClean(t, pids[2], st)
		for _, pid := range pids[:2] {
			if alive(pid) && !isZombie(pid) {
				t.Errorf("pid %d (ganesha or rpcbind) still running after clean-up", pid)
			}
		}
		assertNoProcessIn(t, nets)
	})
	if pids[0] == 0 || pids[1] == 0 || st.NFS == nil || st.NFS.Loop == "" {
		t.Fatalf("NFS target after up: pids %v, %+v", pids[:2], st.NFS)
	}
	if s, err := ReadStatus(ctx); err != nil || !s.Up {
		t.Fatalf("status after up: %+v, %v", s, err)
	}
	dir := t.TempDir()
	loads := []struct {
		host, file string
		args       []string
	}{
		{"b2", NFSReaderFile("b2"), []string{"--job", "smalljob", "--runtime", "4s"}},
		{"b3", NFSWriterFile("b3"), []string{"--job", "seqwrite-64k", "--threads", "2", "--size", "64m", "--runtime", "4s"}},
		{"b4", "made-%d.dat", []string{"--rw", "randread", "--bs", "8k", "--size", "2m", "--runtime", "2s"}},
	}
	cmds := make([]*exec.Cmd, len(loads))
	stderrs := make([]bytes.Buffer, len(loads))
	for i, ld := range loads {
		args := append(ld.args, "--io-log", filepath.Join(dir, ld.host+".io"), "--quiet")
		if cmds[i], err = l.NFSLoadCommand(ctx, ld.host, ld.file, args...); err != nil {
			t.Fatal(err)
		}
		cmds[i].Stderr = &stderrs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, ld := range loads {
		if err := cmds[i].Wait(); err != nil {
			t.Errorf("load on %s: %v: %s", ld.host, err, strings.TrimSpace(stderrs[i].String()))
			continue
		}
		checkIOLog(t, filepath.Join(dir, ld.host+".io"), ld.args[1] == "seqwrite-64k")
	}
	if err := l.DropNFSCache(); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(st.NFS.Export, "made-1.dat")); err != nil {
		t.Errorf("the load generator did not create its file: %v", err)
	}
	// A crash: the lab is let go without being taken down; Cleanup (what
	// the next Up starts with, and `sanqos lab down`) must remove it.
	l.Release()
	crashed = true
	if err := Cleanup(ctx); err != nil {
		t.Errorf("cleanup after a crash: %v", err)
	}
}

// checkIOLog checks a per-I/O log: I/Os of the job's kind, whole blocks,
// positive latencies.
func checkIOLog(t *testing.T, path string, write bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	ios, err := iolog.ReadIOs(f)
	if err != nil || len(ios) < 10 {
		t.Errorf("%s: %d I/Os, %v", path, len(ios), err)
		return
	}
	op := iolog.OpRead
	if write {
		op = iolog.OpWrite
	}
	for _, io := range ios {
		if io.Op != op || io.Len <= 0 || io.LatUs <= 0 || io.Offset%io.Len != 0 {
			t.Errorf("%s: bad I/O %+v", path, io)
			return
		}
	}
	t.Logf("%s: %d %s I/Os, first %.2f ms", filepath.Base(path), len(ios), op, ios[0].LatUs/1000)
}

// labNets are the lab's network namespaces by inode, for
// assertNoProcessIn.
func labNets(t *testing.T) map[uint64]string {
	t.Helper()
	nets := map[uint64]string{}
	for _, ns := range Namespaces() {
		var st syscall.Stat_t
		if err := syscall.Stat("/run/netns/"+ns, &st); err != nil {
			t.Fatalf("namespace %s after up: %v", ns, err)
		}
		nets[st.Ino] = ns
	}
	return nets
}
