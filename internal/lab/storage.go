package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/prometheus/procfs"
)

// Storage says where LUN images live.
type Storage struct {
	// Kind is "emu" (the emulated disk, a FUSE file system over a disk
	// model) or "dir" (a directory on real storage).
	Kind string `json:"kind"`
	// Profile is the disk model of "emu" (thesis-2010, ssd, ram).
	Profile string `json:"profile,omitempty"`
	// Dir is the directory of "dir".
	Dir string `json:"dir,omitempty"`
	// Memory keeps the emulated disk's backing files in RAM (a tmpfs)
	// instead of on this machine's disk: for a profile faster than the
	// host's page-cache writeback, whose stalls would otherwise show up
	// as the emulated device's.
	Memory bool `json:"memory,omitempty"`
}

func (s Storage) String() string {
	switch {
	case s.Kind == "emu" && s.Memory:
		return "emu-mem:" + s.Profile
	case s.Kind == "emu":
		return "emu:" + s.Profile
	}
	return "dir:" + s.Dir
}

// DefaultStorageFor is the emulated disk of profile where the user names
// no storage: its backing files on this machine's disk, but in RAM for
// the ssd profile. At an SSD's write rates the host's page-cache writeback
// of the backing files becomes part of the "device": with them on disk the
// ssd experiment's reader saw single reads of 50-114 ms that the SSD model
// cannot produce, and an uncontrolled p95 of 17.5 ms (3.0-5.8 ms in RAM).
func DefaultStorageFor(profile string) Storage {
	return Storage{Kind: "emu", Profile: profile, Memory: profile == "ssd"}
}

// ParseStorage reads "emu:PROFILE", "emu-mem:PROFILE" or "dir:PATH".
func ParseStorage(s string) (Storage, error) {
	kind, arg, ok := strings.Cut(s, ":")
	switch {
	case ok && kind == "emu" && arg != "":
		return Storage{Kind: "emu", Profile: arg}, nil
	case ok && kind == "emu-mem" && arg != "":
		return Storage{Kind: "emu", Profile: arg, Memory: true}, nil
	case ok && kind == "dir" && arg != "":
		abs, err := filepath.Abs(arg)
		if err != nil {
			return Storage{}, fmt.Errorf("storage %q: %w", s, err)
		}
		return Storage{Kind: "dir", Dir: abs}, nil
	}
	return Storage{}, fmt.Errorf("storage %q: want emu:PROFILE (e.g. emu:thesis-2010), emu-mem:PROFILE (its backing files in RAM) or dir:PATH", s)
}

// ParseSize reads a size such as 2GiB, 512MiB, 1G or a byte count.
func ParseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("size %q: want a positive size such as 2GiB, 512MiB or 1073741824", s)
	}
	return n * mult, nil
}

// imageName is the file name of an initiator's LUN image.
func imageName(initiator string) string { return imagePrefix + initiator + ".img" }

// createImage makes a sparse image of the given size (or keeps an existing
// one of that size, so a re-run does not rewrite gigabytes). It runs as
// root in /var/tmp, where anyone can plant files: the image's directory
// must be a real directory (not a link) that only root (or we) can write,
// the image is opened with O_NOFOLLOW, and what is opened must be a
// regular file with one link, so a symlink or hard link planted there
// can never make the lab truncate another file.
func createImage(path string, size int64) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating image directory: %w", err)
	}
	if err := checkOwnDir(dir); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("LUN image %s is a symbolic link; the lab refuses to follow it: remove it (sanqos lab down) and retry", path)
	}
	if err != nil {
		return fmt.Errorf("creating LUN image: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("checking LUN image %s: %w", path, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || (ok && st.Nlink != 1) {
		f.Close()
		return fmt.Errorf("LUN image %s is not a plain file of its own (mode %v); the lab refuses to size it: remove it and retry", path, fi.Mode())
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("sizing LUN image %s: %w", path, err)
	}
	return f.Close()
}

// checkOwnDir refuses a directory that is a symbolic link or that others
// than root (or the caller) can write to.
func checkOwnDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("checking image directory: %w", err)
	}
	if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
		return fmt.Errorf("image directory %s is not a directory but %v; the lab refuses to use it: remove it and retry", dir, fi.Mode().Type())
	}
	uid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid = int(st.Uid)
	}
	if (uid != 0 && uid != os.Geteuid()) || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("image directory %s can be written by others (mode %v, owner %d); the lab refuses to create images there: remove it and retry", dir, fi.Mode().Perm(), uid)
	}
	return nil
}

// loopDevice is one line of `losetup --json --list`.
type loopDevice struct {
	Name     string `json:"name"`
	BackFile string `json:"back-file"`
	DIO      bool   `json:"dio"`
}

// parseLosetupJSON reads `losetup --json --list` (empty output: no loops).
func parseLosetupJSON(out []byte) ([]loopDevice, error) {
	if len(strings.TrimSpace(string(out))) == 0 {
		return nil, nil
	}
	var doc struct {
		Loopdevices []loopDevice `json:"loopdevices"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("parsing losetup --json output: %w", err)
	}
	return doc.Loopdevices, nil
}

// isLabLoop says whether a loop device is one of ours: its backing file is
// a lab image (the kernel may append " (deleted)" once the file is gone).
func isLabLoop(d loopDevice) bool {
	f := strings.TrimSuffix(d.BackFile, " (deleted)")
	return strings.HasPrefix(filepath.Base(f), imagePrefix) || strings.HasPrefix(f, DataDir+"/") || strings.HasPrefix(f, StateDir+"/")
}

// attachLoop attaches an image to a free loop device with direct I/O and
// proves that direct I/O took: without it the page cache would absorb
// writes and /proc/diskstats would not show the storage's latency.
func attachLoop(ctx context.Context, r runner, sysRoot, image string) (string, error) {
	out, err := r.run(ctx, "losetup", "--find", "--show", "--direct-io=on", image)
	if err != nil {
		return "", fmt.Errorf("attaching %s to a loop device: %w", image, err)
	}
	dev := filepath.Base(strings.TrimSpace(string(out)))
	if !strings.HasPrefix(dev, "loop") {
		return "", fmt.Errorf("losetup printed %q, not a loop device", out)
	}
	dio, err := os.ReadFile(filepath.Join(sysRoot, "block", dev, "loop", "dio"))
	if err != nil {
		return dev, fmt.Errorf("checking direct I/O of %s: %w", dev, err)
	}
	if strings.TrimSpace(string(dio)) != "1" {
		return dev, fmt.Errorf("direct I/O did not take on %s (backing %s): its file system must support O_DIRECT; use another --storage", dev, image)
	}
	return dev, nil
}

// detachLabLoops detaches every loop device whose backing file is a lab
// image and returns what it could not detach.
func detachLabLoops(ctx context.Context, r runner) error {
	out, err := r.run(ctx, "losetup", "--json", "--list")
	if err != nil {
		return fmt.Errorf("listing loop devices: %w", err)
	}
	devs, err := parseLosetupJSON(out)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range devs {
		if !isLabLoop(d) {
			continue
		}
		// A loop device outlives its detach, and with it its BDI's
		// settings: the next user of the device must not inherit the
		// lab's dirty limit (Options.NFSDirtyBytes).
		if err := resetDirty("/sys", filepath.Base(d.Name)); err != nil {
			errs = append(errs, err)
		}
		if _, err := r.run(ctx, "losetup", "--detach", d.Name); err != nil {
			errs = append(errs, fmt.Errorf("detaching %s: %w", d.Name, err))
		}
	}
	return errors.Join(errs...)
}

// mountMemoryBacking mounts a tmpfs of size bytes (the images' full size:
// they are sparse, so it holds only what is written) on the emulated
// disk's backing directory. Clean-up unmounts it with the lab's other
// mounts.
func mountMemoryBacking(size int64) error {
	if err := checkMemoryFor(size); err != nil {
		return err
	}
	dir := emuBackingDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := syscall.Mount("sanqos-lab-backing", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV,
		fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		return fmt.Errorf("mounting a tmpfs for the emulated disk's backing files on %s: %w", dir, err)
	}
	return nil
}

// checkMemoryFor refuses a tmpfs backing larger than the memory available
// now: the images are sparse, but a run that writes them full would push
// the machine into swap or the OOM killer, far from an emulated disk.
func checkMemoryFor(size int64) error {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return fmt.Errorf("reading /proc for the memory available: %w", err)
	}
	mi, err := fs.Meminfo()
	if err != nil || mi.MemAvailable == nil {
		return fmt.Errorf("reading MemAvailable from /proc/meminfo: %v", err)
	}
	if avail := int64(*mi.MemAvailable) << 10; size > avail {
		return fmt.Errorf("the emulated disk's backing files in RAM need up to %.1f GiB, and %.1f GiB are available: "+
			"give the LUNs a smaller --size, or keep the backing files on disk with --storage emu:PROFILE",
			float64(size)/(1<<30), float64(avail)/(1<<30))
	}
	return nil
}
