package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNFSLayout: b2 gets smalljob's file, b3-b5 four writers' files each,
// named as the load generator's --nfs-file patterns name them.
func TestNFSLayout(t *testing.T) {
	var inits []Initiator
	for _, n := range initiatorNames {
		inits = append(inits, Initiator{Name: n})
	}
	files := nfsLayout(inits)
	var total int64
	names := map[string]int64{}
	for _, f := range files {
		names[f.name] = f.size
		total += f.size
	}
	if len(files) != 1+3*NFSWritersPerHost || names["b2-r1.dat"] != NFSReaderSize || names["b5-w4.dat"] != NFSWriterSize {
		t.Fatalf("layout %v", files)
	}
	if got := fmt.Sprintf(NFSWriterFile("b3"), 2); names[got] != NFSWriterSize {
		t.Errorf("writer pattern %q names no file of the layout", got)
	}
	// ext4 needs room beyond the data (journal, metadata).
	if total > nfsImageSize*9/10 {
		t.Errorf("layout of %d MiB does not fit the %d MiB image with room", total>>20, nfsImageSize>>20)
	}
}

// TestGaneshaConfig: the export is the mount point, NFSv3 over TCP only,
// no NLM, no grace; the paths are under the lab's data directory, which
// ganesha's private /run does not cover.
func TestGaneshaConfig(t *testing.T) {
	c := ganeshaConfig("/usr/lib/x86_64-linux-gnu/ganesha", nfsExportDir(), "/var/tmp/sanqos-lab/nfs/recovery")
	for _, want := range []string{
		"Path = " + nfsExportDir() + ";", "Protocols = 3;", "Transports = TCP;", "NFS_Port = 2049;",
		"Enable_NLM = false;", "Graceless = true;", "Squash = No_Root_Squash;", "Name = VFS;",
		"Plugins_Dir = /usr/lib/x86_64-linux-gnu/ganesha;",
	} {
		if !strings.Contains(c, want) {
			t.Errorf("configuration lacks %q:\n%s", want, c)
		}
	}
	for _, p := range []string{nfsExportDir(), ganeshaConfPath(), ganeshaLogPath()} {
		if !under(p, DataDir) || under(p, "/run") {
			t.Errorf("%s: ganesha would not see it behind its own /run", p)
		}
	}
	for _, p := range []string{ganeshaPidFile(), rpcbindPidFile()} {
		if !under(p, StateDir) {
			t.Errorf("%s is not in the lab's state directory", p)
		}
	}
	if u := nfsURL(netip.MustParseAddr("10.213.0.253"), nfsExportDir()); u != "nfs://10.213.0.253/var/tmp/sanqos-lab/nfs/export" {
		t.Errorf("URL %s", u)
	}
	// Its loop devices are the lab's.
	if !isLabLoop(loopDevice{BackFile: "/run/sanqos-lab/emu/" + nfsImageName}) {
		t.Error("the NFS image's loop device is not recognised as the lab's")
	}
}

func TestCheckNFSEnv(t *testing.T) {
	none := func(string) (string, error) { return "", errors.New("not found") }
	err := checkNFSEnv(none)
	if err == nil || !strings.Contains(err.Error(), "apt-get install nfs-ganesha rpcbind e2fsprogs util-linux") {
		t.Errorf("nothing installed: %v", err)
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "usr/lib/x86_64-linux-gnu/ganesha")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "libfsalvfs.so"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	glob := func(p string) ([]string, error) { return filepath.Glob(filepath.Join(dir, p)) }
	if got, err := ganeshaPlugins(glob); err != nil || got != lib {
		t.Errorf("plugins %q, %v", got, err)
	}
	empty := func(string) ([]string, error) { return nil, nil }
	if _, err := ganeshaPlugins(empty); err == nil || !strings.Contains(err.Error(), "nfs-ganesha-vfs") {
		t.Errorf("no VFS backend: %v", err)
	}
}

// TestDropCacheSkipsDirectories: every regular file of the export, and
// nothing else, is synced and dropped.
func TestDropCacheSkipsDirectories(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.dat"), make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := dropCache(dir); err != nil {
		t.Fatal(err)
	}
	if err := dropCache(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing export is not an error")
	}
}

func TestLimitAndResetDirty(t *testing.T) {
	sys := t.TempDir()
	bdi := filepath.Join(sys, "block", "loop7", "bdi")
	if err := os.MkdirAll(bdi, 0o755); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(bdi, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := limitDirty(sys, "loop7", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(bdi, "strict_limit")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no limit asked, yet strict_limit was written (%v)", err)
	}
	if err := limitDirty(sys, "loop7", 1<<20); err != nil {
		t.Fatal(err)
	}
	if got := read("max_bytes"); got != "1048576" {
		t.Errorf("max_bytes = %q, want 1048576", got)
	}
	if got := read("strict_limit"); got != "1" {
		t.Errorf("strict_limit = %q, want 1", got)
	}
	if err := resetDirty(sys, "loop7"); err != nil {
		t.Fatal(err)
	}
	if got, got2 := read("strict_limit"), read("max_ratio"); got != "0" || got2 != "100" {
		t.Errorf("after reset strict_limit = %q, max_ratio = %q; want 0 and 100", got, got2)
	}
	// A kernel without the files (or a device gone) has nothing to reset,
	// but a limit it cannot set is an error that says what it needs.
	if err := resetDirty(sys, "loop9"); err != nil {
		t.Errorf("reset on a device without a BDI: %v", err)
	}
	if err := limitDirty(sys, "loop9", 1<<20); err == nil || !strings.Contains(err.Error(), "Linux 6.2") {
		t.Errorf("limit on a device without a BDI: %v, want an error naming the kernel it needs", err)
	}
}
