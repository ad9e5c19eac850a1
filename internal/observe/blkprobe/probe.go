package blkprobe

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Sizes shared with bpf/blkprobe.bpf.c.
const (
	// MaxDevices is how many devices one probe can watch.
	MaxDevices = 64
	slots      = 64 // read slots per device (SLOTS)
	// The watched-device table (DEVTAB, DEVPROBES): open addressing in a
	// BPF array, which the verifier inlines, instead of a hash map.
	devTab    = 1024
	devProbes = 8
)

// The compiled BPF program: `make bpf` rebuilds it from bpf/blkprobe.bpf.c.
//
//go:embed blkprobe.bpf.o
var bpfObject []byte

// Mirrors of the BPF map values (struct opstats, struct readslots);
// the field order and sizes must match bpf/blkprobe.bpf.c.
type opstats struct {
	Count uint64
	SumNs uint64
	Hist  [NumBuckets]uint64
}

type slot struct {
	Rq uint64
	Ts uint64
}

// devPlace mirrors struct devplace: Idx1 is the device's index + 1.
type devPlace struct {
	Dev  uint32
	Idx1 uint32
}

type readslots struct {
	S         [slots]slot
	Untracked uint64
	Untimed   uint64
}

// Options adjust Open; the zero value is right for production.
type Options struct {
	// ProcRoot is where diskstats is read to resolve names (default /proc).
	ProcRoot string
	// KernelBTF is checked for existence before loading (default
	// /sys/kernel/btf/vmlinux); the program's kernel types are relocated
	// against it.
	KernelBTF string
	// Disable, when set, makes Open fail at once with an UnavailableError
	// wrapping it: for a "do not use eBPF" switch and for tests of the
	// fallback.
	Disable error
}

// Probe is an attached latency probe. Sample and Close may not be called
// concurrently with each other.
type Probe struct {
	names []string
	nums  []devNum
	coll  *ebpf.Collection
	links []link.Link
	stats *ebpf.Map
	slots *ebpf.Map
}

// Open resolves the devices (names as in /proc/diskstats), loads the BPF
// programs and attaches them to the block tracepoints. An error matching
// ErrUnavailable means eBPF cannot be used on this machine; any other error
// is bad input (an unknown device) or a bug.
func Open(devices []string, opts Options) (*Probe, error) {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.KernelBTF == "" {
		opts.KernelBTF = "/sys/kernel/btf/vmlinux"
	}
	table, err := readDiskstats(opts.ProcRoot)
	if err != nil {
		return nil, err
	}
	names, nums, err := resolveDevices(devices, table)
	if err != nil {
		return nil, err
	}
	places, err := devTable(nums)
	if err != nil {
		return nil, err
	}
	if opts.Disable != nil {
		return nil, &UnavailableError{Reason: "disabled", Err: opts.Disable}
	}
	if _, err := os.Stat(opts.KernelBTF); err != nil {
		return nil, &UnavailableError{Reason: "no kernel BTF (CONFIG_DEBUG_INFO_BTF)", Err: err}
	}

	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(bpfObject))
	if err != nil {
		return nil, fmt.Errorf("parsing the embedded BPF object: %w", err)
	}
	// Size the maps to the devices watched: the per-CPU histograms are
	// 2.7 KB per device, direction and CPU, so 64 devices on a 64-CPU
	// machine would take 22 MB for nothing.
	n := uint32(len(nums))
	spec.Maps["readslots"].MaxEntries = n
	spec.Maps["stats"].MaxEntries = 2 * n
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, classify("loading the BPF programs", err)
	}
	p := &Probe{names: names, nums: nums, coll: coll, stats: coll.Maps["stats"], slots: coll.Maps["readslots"]}
	watched := coll.Maps["watched"]
	for k, place := range places {
		if place.Idx1 == 0 {
			continue
		}
		if err := watched.Put(uint32(k), place); err != nil {
			p.Close()
			return nil, fmt.Errorf("filling the watched-device map: %w", err)
		}
	}
	if err := p.attach(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// devHash is dev_hash of bpf/blkprobe.bpf.c: a device's first place in
// the watched-device table (Fibonacci hashing to 10 bits).
func devHash(dev uint32) uint32 { return (dev * 0x9E3779B1) >> 22 }

// devTable lays the devices out in the watched-device table as the BPF
// programs search it: from a device's first place, the first free of
// devProbes places. The table holds 16 times MaxDevices places, so a device
// that finds none free takes a rare collision of hashes; it is refused
// rather than watched in part.
func devTable(nums []devNum) ([devTab]devPlace, error) {
	var table [devTab]devPlace
	for i, d := range nums {
		dev, h := d.kernelDev(), devHash(d.kernelDev())
		placed := false
		for j := uint32(0); j < devProbes && !placed; j++ {
			k := (h + j) & (devTab - 1)
			switch {
			case table[k].Idx1 == 0:
				table[k] = devPlace{Dev: dev, Idx1: uint32(i) + 1}
				placed = true
			case table[k].Dev == dev:
				return table, fmt.Errorf("device %d:%d given twice", d.major, d.minor)
			}
		}
		if !placed {
			return table, fmt.Errorf("device %d:%d: its %d places in the probe's device table are taken by others; watch fewer devices", d.major, d.minor, devProbes)
		}
	}
	return table, nil
}

// attach links the programs to their tracepoints.
func (p *Probe) attach() error {
	for _, name := range []string{"blk_issue", "blk_complete"} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p.coll.Programs[name]})
		if err != nil {
			return classify("attaching "+name, err)
		}
		p.links = append(p.links, l)
	}
	return nil
}

// detach unlinks the programs, keeping them and the maps loaded.
func (p *Probe) detach() error {
	var errs []error
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	p.links = nil
	return errors.Join(errs...)
}

// classify wraps a load or attach failure as UnavailableError with a reason
// an operator can act on.
func classify(what string, err error) error {
	reason := "kernel refused the probe"
	var ve *ebpf.VerifierError
	switch {
	case errors.As(err, &ve):
		// The verifier answers EACCES too: test it before permissions.
		reason = "this kernel's verifier rejected the probe"
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		reason = "no permission (needs root or CAP_BPF and CAP_PERFMON)"
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		reason = "kernel too old or without BPF tracing (needs ≥ 5.17 with CONFIG_BPF_EVENTS and BTF)"
	}
	return &UnavailableError{Reason: reason, Err: fmt.Errorf("%s: %w", what, err)}
}

// Devices returns the watched device names in the order given to Open.
func (p *Probe) Devices() []string { return append([]string(nil), p.names...) }

// Close detaches the programs and frees the maps. It is safe to call twice.
func (p *Probe) Close() error {
	err := p.detach()
	if p.coll != nil {
		p.coll.Close()
		p.coll = nil
	}
	return err
}

// Sample reads the cumulative counters of every watched device and the age
// of its oldest outstanding read; now only stamps the snapshot (the ages
// use the kernel's monotonic clock). Cost: per device two per-CPU lookups
// and one 1 KiB lookup.
func (p *Probe) Sample(now time.Time) (Snapshot, error) {
	if p.coll == nil {
		return Snapshot{}, errors.New("sampling the block probe: already closed")
	}
	snap := Snapshot{At: now, Devices: make(map[string]Device, len(p.names))}
	var percpu []opstats
	var rs readslots
	for i, name := range p.names {
		d := Device{Name: name, Major: p.nums[i].major, Minor: p.nums[i].minor}
		for op, dst := range []*Ops{&d.Read, &d.Write} {
			k := uint32(2*i + op)
			if err := p.stats.Lookup(k, &percpu); err != nil {
				return Snapshot{}, fmt.Errorf("reading latency counters of %s: %w", name, err)
			}
			for _, c := range percpu {
				dst.Count += c.Count
				dst.Sum += time.Duration(c.SumNs)
				for b := range c.Hist {
					dst.Hist[b] += c.Hist[b]
				}
			}
		}
		if err := p.slots.Lookup(uint32(i), &rs); err != nil {
			return Snapshot{}, fmt.Errorf("reading outstanding reads of %s: %w", name, err)
		}
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			return Snapshot{}, fmt.Errorf("reading the monotonic clock: %w", err)
		}
		d.OldestRead, d.ReadsInFlight = oldest(rs.S[:], uint64(ts.Nano()))
		d.Untracked, d.Untimed = rs.Untracked, rs.Untimed
		snap.Devices[name] = d
	}
	return snap, nil
}

// Missed is how many times the kernel skipped one of the probe's programs
// because a BPF program was already running on that CPU (recursion
// protection, e.g. a completion interrupting another): a skipped
// completion is missing from the counts and histograms, a skipped issue
// only from the oldest-read age. Cumulative since Open.
func (p *Probe) Missed() (uint64, error) {
	if p.coll == nil {
		return 0, errors.New("reading the probe's missed runs: already closed")
	}
	var n uint64
	for name, prog := range p.coll.Programs {
		st, err := prog.Stats()
		if err != nil {
			return 0, fmt.Errorf("reading the run statistics of %s: %w", name, err)
		}
		n += st.RecursionMisses
	}
	return n, nil
}

// oldest returns the age at mono (ns) of the earliest issue time in the
// slots, and how many slots are taken. A slot whose owner is set but whose
// time is not yet written (ts 0) counts as taken, not as a time.
func oldest(s []slot, mono uint64) (time.Duration, int) {
	var min uint64
	n := 0
	for _, sl := range s {
		if sl.Ts == 0 {
			continue
		}
		n++
		if min == 0 || sl.Ts < min {
			min = sl.Ts
		}
	}
	if n == 0 || mono <= min {
		return 0, n
	}
	return time.Duration(mono - min), n
}
