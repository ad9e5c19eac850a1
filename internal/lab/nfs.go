package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// NFS in the lab (issue 17): nfs-ganesha (FSAL VFS) and rpcbind in the
// target namespace, serving NFSv3 over TCP on NFSPort from an ext4 file
// system on one loop device of the emulated disk, beside tgtd. Clients of
// one export share its device, which is what the socket adapter and the
// wire attribution of the daemon are for.
//
// ganesha and rpcbind get a /run of their own (a tmpfs in a mount
// namespace of their own, a slave of the host's): ganesha's pid file and
// D-Bus socket and rpcbind's socket and lock live there, so neither meets
// the host's /run or a host rpcbind. Everything they read or write
// besides is under nfsDir(): the configuration, the log, the NFSv4
// recovery directory ganesha insists on, and the export's mount point.
// The mount is made in the host's namespace, where Cleanup finds it; it
// propagates into theirs.

const (
	// NFSPort is ganesha's NFS port in the target namespace.
	NFSPort = 2049
	// nfsImageName is the export's file system image, named like the
	// LUN images so that Cleanup recognises its loop devices.
	nfsImageName = imagePrefix + "nfs.img"
	// nfsImageSize holds the files of nfsLayout (896 MiB) with room to
	// spare; the image is sparse.
	nfsImageSize = 2 << 30
	// NFSReaderSize is a reader's file: smalljob's region (128 MiB).
	NFSReaderSize = 128 << 20
	// NFSWriterSize is a writer thread's file: two of fig5.11's 32 MiB
	// bursts, written over and over (an overwrite needs no allocation,
	// so a FILE_SYNC write is the data and the inode's time, as a LUN
	// write is the data).
	NFSWriterSize = 64 << 20
	// NFSWritersPerHost is how many writer files b3-b5 get: fig5.11's
	// 12 threads over three hosts.
	NFSWritersPerHost = 4
)

// NFS is the lab's NFS target, recorded in State when the lab has one.
type NFS struct {
	// Export is the exported directory (the same path in every namespace).
	Export string `json:"export"`
	// URL is what the load generator mounts (--nfs).
	URL string `json:"url"`
	// Image is the ext4 image on the lab's storage, Loop its loop device.
	Image string `json:"image"`
	Loop  string `json:"loop"`
	Port  int    `json:"port"`
	// Config is ganesha's configuration file, which the daemon's socket
	// adapter reads to find the export.
	Config string `json:"config"`
	// DirtyBytes is the export device's dirty page limit (Options.NFSDirtyBytes), 0 if none.
	DirtyBytes int64 `json:"dirty_bytes,omitempty"`
}

func nfsDir() string          { return filepath.Join(DataDir, "nfs") }
func nfsExportDir() string    { return filepath.Join(nfsDir(), "export") }
func nfsPrepDir() string      { return filepath.Join(nfsDir(), "prep") }
func ganeshaConfPath() string { return filepath.Join(nfsDir(), "ganesha.conf") }
func ganeshaLogPath() string  { return filepath.Join(nfsDir(), "ganesha.log") }
func ganeshaPidFile() string  { return filepath.Join(StateDir, "ganesha.pid") }
func rpcbindPidFile() string  { return filepath.Join(StateDir, "rpcbind.pid") }

// NFSReaderFile and NFSWriterFile are the load generator's --nfs-file
// patterns of a host's reader and writer threads.
func NFSReaderFile(host string) string { return host + "-r%d.dat" }
func NFSWriterFile(host string) string { return host + "-w%d.dat" }

// nfsFile is one file the lab lays out on the export.
type nfsFile struct {
	name string
	size int64
}

// nfsLayout is what `lab run nfs` reads and writes: a reader's file for
// the first initiator (b2) and NFSWritersPerHost writer files for each
// of the others. A job on other files creates them itself, through NFS.
func nfsLayout(inits []Initiator) []nfsFile {
	var out []nfsFile
	for i, in := range inits {
		if i == 0 {
			out = append(out, nfsFile{fmt.Sprintf(NFSReaderFile(in.Name), 1), NFSReaderSize})
			continue
		}
		for t := 1; t <= NFSWritersPerHost; t++ {
			out = append(out, nfsFile{fmt.Sprintf(NFSWriterFile(in.Name), t), NFSWriterSize})
		}
	}
	return out
}

// nfsTools are the commands the NFS target needs beyond requiredTools.
var nfsTools = []struct{ cmd, pkg string }{
	{"ganesha.nfsd", "nfs-ganesha"},
	{"rpcbind", "rpcbind"},
	{"rpcinfo", "rpcbind"},
	{"mkfs.ext4", "e2fsprogs"},
	{"unshare", "util-linux"},
}

// ganeshaPlugins finds ganesha's FSAL directory: Debian's is not the
// compiled-in default ganesha's own documentation gives.
func ganeshaPlugins(glob func(string) ([]string, error)) (string, error) {
	for _, pat := range []string{"/usr/lib/*/ganesha/libfsalvfs.so", "/usr/lib*/ganesha/libfsalvfs.so"} {
		if m, _ := glob(pat); len(m) > 0 {
			return filepath.Dir(m[0]), nil
		}
	}
	return "", errors.New("the NFS lab needs nfs-ganesha's VFS backend (libfsalvfs.so), which is not installed: run 'apt-get install nfs-ganesha-vfs' (or 'make deps')")
}

// checkNFSEnv is checkTools for the NFS target.
func checkNFSEnv(lookPath func(string) (string, error)) error {
	var missing, pkgs []string
	for _, t := range nfsTools {
		if _, err := lookPath(t.cmd); err != nil {
			missing = append(missing, t.cmd)
			if !contains(pkgs, t.pkg) {
				pkgs = append(pkgs, t.pkg)
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the NFS lab needs %s, not installed: run 'apt-get install %s' (or 'make deps')",
			strings.Join(missing, ", "), strings.Join(pkgs, " "))
	}
	_, err := ganeshaPlugins(filepath.Glob)
	return err
}

// prepareNFSImage makes the export's file system on image, on the lab's
// storage but before the emulated disk serves it, and lays out files on
// it through a loop device of its own at this machine's disk speed
// (through the emulated disk the 896 MiB would take half a minute).
// The files are written out, not sparse: a hole reads as zeros without
// touching the disk, and a first write into one allocates.
func prepareNFSImage(ctx context.Context, r runner, image string, files []nfsFile) (err error) {
	if err := createImage(image, nfsImageSize); err != nil {
		return err
	}
	// Inode tables and journal initialised now: ext4's lazy init would
	// write them in the background during the first run.
	if _, err := r.run(ctx, "mkfs.ext4", "-q", "-F", "-L", "sanqos-nfs", "-m", "0",
		"-E", "lazy_itable_init=0,lazy_journal_init=0", image); err != nil {
		return fmt.Errorf("making the NFS export's file system: %w", err)
	}
	out, err := r.run(ctx, "losetup", "--find", "--show", image)
	if err != nil {
		return fmt.Errorf("attaching the NFS image to lay out its files: %w", err)
	}
	dev := strings.TrimSpace(string(out))
	defer func() {
		if _, derr := r.run(context.WithoutCancel(ctx), "losetup", "--detach", dev); derr != nil && err == nil {
			err = fmt.Errorf("detaching %s: %w", dev, derr)
		}
	}()
	mp := nfsPrepDir()
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", mp, err)
	}
	if err := syscall.Mount(dev, mp, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mounting %s on %s: %w", dev, mp, err)
	}
	defer func() {
		if uerr := syscall.Unmount(mp, 0); uerr != nil && err == nil {
			err = fmt.Errorf("unmounting %s: %w", mp, uerr)
		}
	}()
	for _, f := range files {
		if err := writeDataFile(filepath.Join(mp, f.name), f.size); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// writeDataFile writes a new file of size bytes of data and syncs it.
func writeDataFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("laying out %s: %w", path, err)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*131 + i>>9)
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), size-off)]); err != nil {
			f.Close()
			return fmt.Errorf("laying out %s: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("laying out %s: %w", path, err)
	}
	return f.Close()
}

// mountExport mounts the export's file system from its loop device (the
// one through the emulated disk). noatime: a read must not become a
// write. barrier=0: ganesha fsyncs every FILE_SYNC write, and with
// barriers each of ext4's journal commits would reach the emulated
// disk as a real fsync of its backing file on this machine's disk,
// outside the disk model (the thesis's array, like tgtd's direct writes,
// had no flush per write).
func mountExport(loop string) error {
	mp := nfsExportDir()
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", mp, err)
	}
	if err := syscall.Mount("/dev/"+loop, mp, "ext4", syscall.MS_NOATIME, "barrier=0"); err != nil {
		return fmt.Errorf("mounting the NFS export's file system (/dev/%s) on %s: %w", loop, mp, err)
	}
	return nil
}

// limitDirty caps the dirty page cache of loop's file system at n bytes
// (under sys, /sys on the host): the BDI's max_bytes with strict_limit,
// which applies it even while the machine's dirty memory is under its
// global background threshold. Without it ext4 keeps an UNSTABLE
// write's data in the page cache until the client's COMMIT (or 30 s) and
// writes all of it out then. The limit lives and dies with the loop
// device, which the lab detaches on its way down.
func limitDirty(sys, loop string, n int64) error {
	if n <= 0 {
		return nil
	}
	dir := filepath.Join(sys, "block", loop, "bdi")
	for _, f := range []struct{ name, val string }{{"max_bytes", fmt.Sprint(n)}, {"strict_limit", "1"}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.val), 0o644); err != nil {
			return fmt.Errorf("limiting the NFS export's dirty page cache (%s; needs Linux 6.2 or later): %w", f.name, err)
		}
	}
	return nil
}

// resetDirty gives loop's BDI the kernel's defaults back (no strict
// limit, 100 % of the dirty memory), whatever limitDirty set. A kernel
// without the files has nothing to reset.
func resetDirty(sys, loop string) error {
	dir := filepath.Join(sys, "block", loop, "bdi")
	for _, f := range []struct{ name, val string }{{"strict_limit", "0"}, {"max_ratio", "100"}} {
		err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.val), 0o644)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("resetting %s's dirty page limit (%s): %w", loop, f.name, err)
		}
	}
	return nil
}

// ganeshaConfig is ganesha's configuration: NFSv3 over TCP only, no NLM
// (it would want rpc.statd), no grace period (no NFSv4 state to
// recover), one export of the whole file system to every client of the
// lab, root not squashed (the load generator runs as root).
func ganeshaConfig(plugins, export, recovery string) string {
	return fmt.Sprintf(`# nfs-ganesha configuration written by the sanqos lab.
NFS_CORE_PARAM {
	Protocols = 3;
	NFS_Port = %d;
	Enable_NLM = false;
	Plugins_Dir = %s;
}
NFSV4 {
	Graceless = true;
	RecoveryRoot = %s;
}
EXPORT {
	Export_Id = 1;
	Path = %s;
	Pseudo = %s;
	Access_Type = RW;
	Squash = No_Root_Squash;
	Protocols = 3;
	Transports = TCP;
	SecType = sys;
	FSAL { Name = VFS; }
}
`, NFSPort, plugins, recovery, export, export)
}

// nfsScript runs in the target namespace, in a mount namespace of its
// own: it records rpcbind's pid in the host's /run (fd 3, opened before
// /run is covered), covers /run with a tmpfs, starts rpcbind and, once
// its socket is there, becomes ganesha (so the pid Up records is
// ganesha's). $1 rpcbind's pid file, $2 the configuration, $3 the log.
const nfsScript = `set -e
exec 3>"$1"
mount -t tmpfs -o size=16m,mode=0755 sanqos-lab-nfsrun /run
mkdir -p /run/ganesha /run/rpcbind
rpcbind -f &
echo $! >&3
exec 3>&-
i=0
while [ ! -S /run/rpcbind.sock ]; do
	i=$((i+1))
	if [ $i -gt 200 ]; then echo "rpcbind did not create /run/rpcbind.sock within 10 s" >&2; exit 1; fi
	sleep 0.05
done
exec ganesha.nfsd -F -f "$2" -L "$3" -p /run/ganesha/ganesha.pid -N NIV_EVENT
`

// startNFS writes ganesha's configuration, starts rpcbind and ganesha
// and waits until NFS and MOUNT answer on TCP in the target namespace.
func startNFS(ctx context.Context, r runner) error {
	plugins, err := ganeshaPlugins(filepath.Glob)
	if err != nil {
		return err
	}
	recovery := filepath.Join(nfsDir(), "recovery")
	if err := os.MkdirAll(recovery, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", recovery, err)
	}
	if err := os.WriteFile(ganeshaConfPath(), []byte(ganeshaConfig(plugins, nfsExportDir(), recovery)), 0o644); err != nil {
		return fmt.Errorf("writing ganesha's configuration: %w", err)
	}
	argv := []string{"ip", "netns", "exec", TargetNS, "unshare", "--mount", "--propagation", "slave",
		"sh", "-c", nfsScript, "sanqos-lab-nfs", rpcbindPidFile(), ganeshaConfPath(), ganeshaLogPath()}
	p, err := startDetached(argv, filepath.Join(StateDir, "nfs.log"), ganeshaPidFile())
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err1 := inNS(ctx, r, TargetNS, "rpcinfo", "-T", "tcp", "127.0.0.1", "nfs", "3")
		_, err2 := inNS(ctx, r, TargetNS, "rpcinfo", "-T", "tcp", "127.0.0.1", "mountd", "3")
		if err1 == nil && err2 == nil {
			return nil
		}
		if !alive(p.Pid) || isZombie(p.Pid) {
			return fmt.Errorf("nfs-ganesha exited at start: %s", nfsLogTail())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting for nfs-ganesha to serve NFSv3 and MOUNT in %s: %w; %s", TargetNS, errors.Join(err1, err2), nfsLogTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// nfsLogTail is the end of the start script's and ganesha's logs.
func nfsLogTail() string {
	var parts []string
	for _, p := range []string{filepath.Join(StateDir, "nfs.log"), ganeshaLogPath()} {
		b, _ := os.ReadFile(p)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 4 {
			lines = lines[len(lines)-4:]
		}
		if s := strings.Join(lines, " | "); s != "" {
			parts = append(parts, filepath.Base(p)+": "+s)
		}
	}
	if len(parts) == 0 {
		return "no log"
	}
	return strings.Join(parts, "; ")
}

// nfsURL is the export as the load generator names it.
func nfsURL(addr netip.Addr, export string) string { return "nfs://" + addr.String() + export }

// NFS is the lab's NFS target (nil when the lab was brought up without).
func (l *Lab) NFS() *NFS {
	if l.st.NFS == nil {
		return nil
	}
	n := *l.st.NFS
	return &n
}

// NFSLoadCommand is LoadCommand for NFS: the load generator in the
// initiator's namespace against the lab's export, each thread on the
// file file (a pattern with %d, see NFSReaderFile) of the export.
func (l *Lab) NFSLoadCommand(ctx context.Context, initiator, file string, args ...string) (*exec.Cmd, error) {
	if l.st.NFS == nil {
		return nil, errors.New("the lab has no NFS target: bring it up with Options.NFS (sanqos lab up --nfs)")
	}
	return l.loadCommand(ctx, initiator, []string{"--nfs", l.st.NFS.URL, "--nfs-file", file}, args)
}

// DropNFSCache evicts the export's files from the page cache, so that
// the next run's reads reach the disk as the first run's did: a run's
// reader reads the same blocks as the run before it (the same seed),
// and ganesha reads through the page cache (a LUN is read with direct
// I/O). The export is mounted in this namespace and ganesha's, one
// file system with one cache.
func (l *Lab) DropNFSCache() error {
	if l.st.NFS == nil {
		return nil
	}
	return dropCache(l.st.NFS.Export)
}

func dropCache(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("dropping the NFS export's cache: %w", err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("dropping the NFS export's cache: %w", err)
		}
		// Dirty pages are not dropped: sync them first. Writers' data
		// is FILE_SYNC and already clean.
		err = f.Sync()
		if err == nil {
			err = fadviseDontNeed(int(f.Fd()))
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("dropping the cache of %s: %w", e.Name(), err)
		}
	}
	return nil
}

// fadviseDontNeed is posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED).
func fadviseDontNeed(fd int) error {
	const fadvDontNeed = 4
	_, _, errno := syscall.Syscall6(syscall.SYS_FADVISE64, uintptr(fd), 0, 0, fadvDontNeed, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// stopNFS ends ganesha and rpcbind by their pid files, for when their
// namespace is gone (they are normally stopped with the rest of the
// target namespace's processes), and unmounts the export, plainly first
// so that ext4 writes what it holds while its disk still answers.
func stopNFS() []error {
	var errs []error
	for _, p := range []struct{ file, want string }{{ganeshaPidFile(), "ganesha.nfsd"}, {rpcbindPidFile(), "rpcbind"}} {
		if err := stopPid(readPid(p.file), p.want, 3*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	mounts, err := labMounts()
	if err != nil {
		return append(errs, err)
	}
	for _, m := range mounts {
		if !under(m, nfsDir()) {
			continue
		}
		if err := syscall.Unmount(m, 0); err != nil {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
			}
		}
	}
	return errs
}

// pidOf is a recorded pid of a lab process that is running (0 if not).
func pidOf(file string) int {
	if pid := readPid(file); alive(pid) && !isZombie(pid) {
		return pid
	}
	return 0
}

// nfsProblems are the NFS target's problems for Status.
func nfsProblems(n *NFS) []string {
	var out []string
	if pidOf(ganeshaPidFile()) == 0 {
		out = append(out, "nfs-ganesha is not running")
	}
	if pidOf(rpcbindPidFile()) == 0 {
		out = append(out, "the lab's rpcbind is not running")
	}
	if mounts, err := labMounts(); err == nil && !contains(mounts, n.Export) {
		out = append(out, "the NFS export's file system is not mounted at "+n.Export)
	}
	return out
}
