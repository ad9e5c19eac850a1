package topology

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sanqos/sanqos/internal/observe/mountinfo"
)

// maxDepth bounds the walk down the device stack: real stacks are 3-4
// deep (loop on a file on dm on a partition); anything deeper is a cycle
// in a broken fixture or a sysfs we do not understand.
const maxDepth = 16

// Resolution is where one LUN backing store lands.
type Resolution struct {
	// Device is the kernel name of the block device that serves the LUN
	// ("loop3", "dm-0", "sdb1"): the one whose /proc/diskstats line shows
	// that LUN's latency.
	Device string
	// Leaves are what the device finally shares with others: whole disks
	// ("sda") or, for files on a file system without a block device
	// (FUSE, tmpfs), "fs:" + its mount point.
	Leaves []string
	// Name is the suggested resource name: "vg-<VG>" for LVM, "md-<md>"
	// for software RAID, "fs-<dev>"
	// or "fs-<mount point>" for files, "disk-<disk>" otherwise.
	Name string
}

// Resolver walks a LUN backing path down to the devices it shares. Its
// roots are constructor arguments so tests run against fixture trees.
type Resolver struct {
	sys       string // sysfs root, "/sys"
	dev       string // /dev root, "/dev"
	mountinfo string // path of a mountinfo file, "/proc/self/mountinfo"
}

// NewResolver returns a resolver over the given sysfs root (normally
// "/sys"), /dev root (normally "/dev") and mountinfo file (normally
// "/proc/self/mountinfo").
func NewResolver(sysRoot, devRoot, mountinfo string) *Resolver {
	return &Resolver{sys: sysRoot, dev: devRoot, mountinfo: mountinfo}
}

// DefaultResolver resolves against the running system.
func DefaultResolver() *Resolver {
	return NewResolver("/sys", "/dev", "/proc/self/mountinfo")
}

// Resolve finds the device serving backing and what it lands on. backing
// is a block device path (/dev/loop3, /dev/mapper/vg-lv, /dev/sdb1), a
// kernel device name ("dm-0"), or a regular file (an image tgt serves
// directly: it is served by the device holding its file system).
func (r *Resolver) Resolve(backing string) (Resolution, error) {
	mounts, err := r.readMounts()
	if err != nil {
		return Resolution{}, err
	}
	name, err := r.deviceName(backing)
	if err != nil {
		return Resolution{}, err
	}
	var res Resolution
	isFile := name == ""
	if isFile {
		// A regular file: served by the file system that holds it.
		m, ok := mountFor(mounts, backing)
		if !ok {
			return Resolution{}, fmt.Errorf("resolving %s: no mount holds it in %s", backing, r.mountinfo)
		}
		dev, ok := r.mountDevice(m)
		if !ok {
			return Resolution{}, fmt.Errorf("resolving %s: it is a file on %s (%s), which has no block device whose latency could be measured; attach it to a loop device and export that", backing, m.Point, m.FSType)
		}
		name = dev
	}
	res.Device = name
	leaves := map[string]bool{}
	hint, err := r.walk(name, mounts, leaves, 0)
	if err != nil {
		return Resolution{}, fmt.Errorf("resolving %s: %w", backing, err)
	}
	if isFile && hint.fs == "" {
		// Images on one file system share it: name it after that.
		hint.fs = name
	}
	res.Leaves = sortedKeys(leaves)
	res.Name = hint.name()
	return res, nil
}

// deviceName maps a backing path to a kernel block device name, or ""
// when it is a regular file.
func (r *Resolver) deviceName(backing string) (string, error) {
	if !strings.Contains(backing, "/") {
		if r.exists(r.sysPath("class/block", backing)) {
			return backing, nil
		}
		return "", fmt.Errorf("resolving %s: no such block device in %s", backing, r.sysPath("class/block"))
	}
	clean := filepath.Clean(backing)
	if rel, ok := strings.CutPrefix(clean, "/dev/"); ok {
		// Follow udev's symlinks (/dev/mapper/vg-lv -> ../dm-0,
		// /dev/vg/lv -> ../dm-0, /dev/disk/by-id/... -> ../../sdb) inside
		// the /dev root we were given.
		p := filepath.Join(r.dev, rel)
		for range maxDepth {
			fi, err := os.Lstat(p)
			if err != nil {
				break
			}
			if fi.Mode()&fs.ModeSymlink == 0 {
				break
			}
			t, err := os.Readlink(p)
			if err != nil {
				return "", fmt.Errorf("resolving %s: %w", backing, err)
			}
			if !filepath.IsAbs(t) {
				t = filepath.Join(filepath.Dir(p), t)
			} else if d, ok := strings.CutPrefix(t, "/dev/"); ok {
				t = filepath.Join(r.dev, d)
			}
			p = t
		}
		name := filepath.Base(p)
		if r.exists(r.sysPath("class/block", name)) {
			return name, nil
		}
		// A device node with another name: ask the kernel by number.
		if n, ok := r.nameByRdev(p); ok {
			return n, nil
		}
		return "", fmt.Errorf("resolving %s: %s is not a block device known to %s", backing, name, r.sysPath("class/block"))
	}
	if n, ok := r.nameByRdev(clean); ok {
		return n, nil
	}
	return "", nil
}

func (r *Resolver) sysPath(parts ...string) string {
	return filepath.Join(append([]string{r.sys}, parts...)...)
}

func (r *Resolver) exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func (r *Resolver) readTrim(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}

// hint collects naming evidence seen during a walk, strongest first.
type hint struct {
	vg   string // LVM volume group
	md   string // software RAID array
	fs   string // file system holding an image file
	disk string // first whole disk reached
}

func (h hint) name() string {
	switch {
	case h.vg != "":
		return "vg-" + h.vg
	case h.md != "":
		return "md-" + h.md
	case h.fs != "":
		return "fs-" + h.fs
	case h.disk != "":
		return "disk-" + h.disk
	}
	return ""
}

// walk descends from block device name to its leaves.
func (r *Resolver) walk(name string, mounts []mountinfo.Mount, leaves map[string]bool, depth int) (hint, error) {
	var h hint
	if depth > maxDepth {
		return h, fmt.Errorf("device stack deeper than %d at %s (a cycle?)", maxDepth, name)
	}
	dir := r.sysPath("class/block", name)
	if !r.exists(dir) {
		return h, fmt.Errorf("no %s", dir)
	}
	// Partition: its disk is the parent directory of its sysfs node.
	if r.exists(filepath.Join(dir, "partition")) {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return h, fmt.Errorf("reading partition %s: %w", name, err)
		}
		parent := filepath.Base(filepath.Dir(real))
		sub, err := r.walk(parent, mounts, leaves, depth+1)
		return merge(h, sub), err
	}
	// Device mapper (LVM, crypt, multipath): its slaves.
	if r.exists(filepath.Join(dir, "dm")) {
		if uuid, err := r.readTrim(filepath.Join(dir, "dm/uuid")); err == nil && strings.HasPrefix(uuid, "LVM-") {
			if dmName, err := r.readTrim(filepath.Join(dir, "dm/name")); err == nil {
				h.vg = lvmVG(dmName)
			}
		}
	}
	// Software RAID: the array is what its members share.
	if r.exists(filepath.Join(dir, "md")) {
		h.md = name
	}
	slaves, err := os.ReadDir(filepath.Join(dir, "slaves"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return h, fmt.Errorf("reading slaves of %s: %w", name, err)
	}
	if len(slaves) > 0 {
		for _, s := range slaves {
			sub, err := r.walk(s.Name(), mounts, leaves, depth+1)
			if err != nil {
				return h, err
			}
			h = merge(h, sub)
		}
		return h, nil
	}
	// Loop device: the device or file system holding its backing file.
	bf := filepath.Join(dir, "loop/backing_file")
	if r.exists(bf) {
		file, err := r.readTrim(bf)
		if err != nil {
			return h, fmt.Errorf("reading %s: %w", bf, err)
		}
		file = strings.TrimSuffix(file, " (deleted)")
		m, ok := mountFor(mounts, file)
		if !ok {
			return h, fmt.Errorf("loop %s: no mount holds its backing file %s", name, file)
		}
		dev, ok := r.mountDevice(m)
		if !ok {
			// FUSE, tmpfs, NFS: no block device below; the file system
			// itself is what the loop devices share.
			leaves["fs:"+m.Point] = true
			h.fs = mountName(m.Point)
			return h, nil
		}
		sub, err := r.walk(dev, mounts, leaves, depth+1)
		h = merge(h, sub)
		h.fs = dev
		return h, err
	}
	leaves[name] = true
	h.disk = name
	return h, nil
}

// merge keeps the first evidence found at each strength.
func merge(a, b hint) hint {
	if a.vg == "" {
		a.vg = b.vg
	}
	if a.md == "" {
		a.md = b.md
	}
	if a.fs == "" {
		a.fs = b.fs
	}
	if a.disk == "" {
		a.disk = b.disk
	}
	return a
}

// lvmVG extracts the volume group from a dm name "vg-lv", where LVM
// doubles the dashes inside each part ("my--vg-lv" is VG "my-vg").
func lvmVG(dmName string) string {
	for i := 0; i < len(dmName); i++ {
		if dmName[i] != '-' {
			continue
		}
		if i+1 < len(dmName) && dmName[i+1] == '-' {
			i++
			continue
		}
		return strings.ReplaceAll(dmName[:i], "--", "-")
	}
	return strings.ReplaceAll(dmName, "--", "-")
}

// mountName turns a mount point into a name part that fits a resource
// name: the whole path when "fs-" + it fits ("/mnt/sanqos disk" ->
// "mnt/sanqos disk", sanitized later), else its last components that fit
// and a hash of the whole path, so two mounts with the same tail
// ("/a/mnt", "/b/mnt") never share a name: "/run/sanqos-lab/emu" ->
// "emu-<hash6>".
func mountName(point string) string {
	s := strings.Trim(point, "/")
	if s == "" {
		return "root"
	}
	const room = MaxNameLen - len("fs-")
	if len(SanitizeName(s)) <= room {
		return s
	}
	parts := strings.Split(s, "/")
	tail := ""
	for i := len(parts) - 1; i >= 0; i-- {
		cand := strings.Join(parts[i:], "/")
		if len(SanitizeName(cand)) > room-7 {
			break
		}
		tail = cand
	}
	sum := sha256.Sum256([]byte(point))
	h := hex.EncodeToString(sum[:])[:6]
	if tail == "" {
		return h
	}
	return tail + "-" + h
}

// mountDevice returns the block device of a mount, if it has one.
// Anonymous devices (major 0: FUSE, tmpfs, overlay, btrfs subvolumes) have
// no /proc/diskstats line.
func (r *Resolver) mountDevice(m mountinfo.Mount) (string, bool) {
	if m.Major == 0 {
		return "", false
	}
	return r.nameByNumber(m.Major, m.Minor)
}

// nameByNumber maps MAJ:MIN to a kernel name via /sys/dev/block.
func (r *Resolver) nameByNumber(major, minor int) (string, bool) {
	p := r.sysPath("dev/block", fmt.Sprintf("%d:%d", major, minor))
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", false
	}
	return filepath.Base(real), true
}

// readMounts reads the mount table the resolver was built with.
func (r *Resolver) readMounts() ([]mountinfo.Mount, error) {
	return mountinfo.Read(r.mountinfo)
}

// mountFor returns the mount holding path: the longest mount point that
// is a prefix of it, the last such mount winning (it is on top).
func mountFor(mounts []mountinfo.Mount, path string) (mountinfo.Mount, bool) {
	path = filepath.Clean(path)
	best, found := mountinfo.Mount{}, false
	for _, m := range mounts {
		if m.Point != "/" && path != m.Point && !strings.HasPrefix(path, m.Point+"/") {
			continue
		}
		if !found || len(m.Point) >= len(best.Point) {
			best, found = m, true
		}
	}
	return best, found
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// MaxNameLen is the longest resource name: ipset names are at most 31
// bytes and sanqos prefixes "sanqos-" and suffixes a few bytes of its own.
const MaxNameLen = 20

// SanitizeName makes a stable resource name usable in ipset names and
// metric labels: only [a-z0-9._-] (others become '-'), at most MaxNameLen
// bytes; longer names keep a prefix and end in a hash of the full name,
// so two long names stay distinct and a name never changes between runs.
func SanitizeName(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(s) {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_'
		if !ok {
			if !dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = true
			continue
		}
		b.WriteRune(c)
		dash = false
	}
	out := strings.TrimRight(b.String(), "-")
	if out == "" {
		out = "res"
	}
	if len(out) <= MaxNameLen {
		return out
	}
	sum := sha256.Sum256([]byte(s))
	suffix := hex.EncodeToString(sum[:])[:6]
	return strings.TrimRight(out[:MaxNameLen-len(suffix)-1], "-") + "-" + suffix
}
