// Package loadspec describes a load-generator job — what to read or write,
// in which pattern, how fast and for how long — and the pure parts of running
// one: presets mirroring the thesis's fio job files (Appendix D), size
// parsing, the per-thread rate pacer, the on/off burst schedule, the offset
// sequence and the verify pattern. The iSCSI load generator
// (cmd/sanqos-iscsiload) uses it; keeping it free of cgo lets the lab and
// tests use the same definitions.
package loadspec

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Mode is the access pattern of a job, named as fio's rw= values.
type Mode string

const (
	Read      Mode = "read"      // sequential reads
	Write     Mode = "write"     // sequential writes
	RandRead  Mode = "randread"  // random reads, each block once per pass
	RandWrite Mode = "randwrite" // random writes, each block once per pass
)

// IsWrite reports whether the mode writes.
func (m Mode) IsWrite() bool { return m == Write || m == RandWrite }

// IsRandom reports whether the mode visits blocks in random order.
func (m Mode) IsRandom() bool { return m == RandRead || m == RandWrite }

func (m Mode) valid() bool {
	switch m {
	case Read, Write, RandRead, RandWrite:
		return true
	}
	return false
}

// Job is one load-generator job. Sizes are bytes, Rate is bytes per second
// per thread. Every thread works on its own region of the LUN (see
// Regions), so threads never overwrite each other's data.
type Job struct {
	Name      string
	Mode      Mode
	BlockSize int64
	// Size is how much each thread reads or writes per pass. 0 means the
	// whole of its region.
	Size int64
	// Offset is where the first thread's region starts on the LUN.
	Offset  int64
	Threads int
	// IODepth is how many I/Os each thread keeps outstanding on its
	// connection (fio's iodepth with an async engine). 0 and 1 both mean
	// one synchronous I/O at a time, the thesis's fio jobs; at most
	// MaxIODepth.
	IODepth int
	// Fsync makes each thread flush after every Fsync writes, as fio's
	// fsync=N: a SYNCHRONIZE CACHE on a LUN, a COMMIT over NFS (whose
	// writes are then UNSTABLE, cached by the server until the COMMIT,
	// as a kernel client's buffered writes and fsync are). 0: never.
	Fsync int
	// Rate limits each thread to this many bytes per second (0: no limit).
	Rate int64
	// Runtime stops the job after this long (0: when Size is done).
	Runtime time.Duration
	// TimeBased repeats passes over the region until Runtime, like fio's
	// time_based.
	TimeBased bool
	// OnSize and OffTime make an on/off schedule: all threads start
	// together, each moves OnSize bytes, they pause OffTime once all are
	// done, and repeat until Runtime.
	OnSize  int64
	OffTime time.Duration
	// Verify writes a checkable pattern and reads it back (write modes), or
	// checks data an earlier verify run wrote (read modes).
	Verify bool
	// Seed makes random offsets and the verify pattern reproducible.
	Seed int64
}

// MaxIODepth is the deepest queue a thread may keep: far beyond what a VM
// or database issues on one connection (32–64), and within what tgt
// accepts on one session (its default command window is 128; beyond it
// libiscsi queues the rest itself).
const MaxIODepth = 256

// Depth is the number of I/Os a thread keeps outstanding: IODepth, or 1
// when it is unset.
func (j Job) Depth() int { return max(j.IODepth, 1) }

// Presets mirror the fio job files of the thesis, Appendix D.
var presets = map[string]Job{
	// D.4: sequential reader of figures 5.1 and 5.2.
	"seqread-32k": {Mode: Read, BlockSize: 32 * KiB, Size: 2048 * MiB, Threads: 1},
	// D.3 and D.5: the interfering sequential writer.
	"seqwrite-64k": {Mode: Write, BlockSize: 64 * KiB, Size: 2048 * MiB, Threads: 1},
	// Not in the thesis: small random writers, the many-VM or database
	// load that saturates a disk array far harder than sequential
	// streams (every I/O a seek), for the lab's randw experiment.
	"randwrite-8k": {Mode: RandWrite, BlockSize: 8 * KiB, Size: 2048 * MiB, Threads: 1},
	// Not in the thesis either: a database's or a VM's small random
	// writes (4 KiB pages; 16 KiB, InnoDB's page), for the experiments of
	// workloads the law was not tuned on (steadyw, deepq).
	"randwrite-4k":  {Mode: RandWrite, BlockSize: 4 * KiB, Size: 2048 * MiB, Threads: 1},
	"randwrite-16k": {Mode: RandWrite, BlockSize: 16 * KiB, Size: 2048 * MiB, Threads: 1},
	// A backup's or a bulk load's large sequential writes, for the
	// capped experiment (a volume behind IOPS and throughput caps).
	"seqwrite-1m": {Mode: Write, BlockSize: 1 * MiB, Size: 2048 * MiB, Threads: 1},
	// D.2: the small rate-limited random reader whose latency is protected.
	"smalljob": {Mode: RandRead, BlockSize: 8 * KiB, Size: 128 * MiB, Rate: 256 * KiB, Threads: 1},
}

// Default is the job used when no preset is named.
var Default = Job{Name: "job", Mode: Read, BlockSize: 64 * KiB, Threads: 1, Seed: 1}

// Preset returns the named preset, or an error listing the presets.
func Preset(name string) (Job, error) {
	j, ok := presets[name]
	if !ok {
		return Job{}, fmt.Errorf("unknown job %q; presets are %s", name, strings.Join(PresetNames(), ", "))
	}
	j.Name = name
	j.Seed = 1
	return j, nil
}

// PresetNames lists the presets in order.
func PresetNames() []string {
	var names []string
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PresetHelp describes every preset in one line each.
func PresetHelp() string {
	var b strings.Builder
	for _, n := range PresetNames() {
		j := presets[n]
		fmt.Fprintf(&b, "  %-13s rw=%s bs=%s size=%s", n, j.Mode, FormatSize(j.BlockSize), FormatSize(j.Size))
		if j.Rate > 0 {
			fmt.Fprintf(&b, " rate=%s/s", FormatSize(j.Rate))
		}
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Validate checks the job on its own, before the LUN size is known.
func (j Job) Validate() error {
	var errs []error
	if j.Name == "" {
		errs = append(errs, fmt.Errorf("--name cannot be empty"))
	}
	if !j.Mode.valid() {
		errs = append(errs, fmt.Errorf("--rw %q: use read, write, randread or randwrite", j.Mode))
	}
	if j.BlockSize <= 0 {
		errs = append(errs, fmt.Errorf("--bs must be positive"))
	}
	if j.Threads < 1 {
		errs = append(errs, fmt.Errorf("--threads must be at least 1"))
	}
	if j.IODepth < 0 || j.IODepth > MaxIODepth {
		errs = append(errs, fmt.Errorf("--iodepth %d: want 1 to %d I/Os outstanding per thread", j.IODepth, MaxIODepth))
	}
	if j.Fsync < 0 {
		errs = append(errs, fmt.Errorf("--fsync %d: want the number of writes between flushes, or 0 for none", j.Fsync))
	}
	if j.Fsync > 0 && !j.Mode.IsWrite() {
		errs = append(errs, fmt.Errorf("--fsync needs a write mode (--rw write or randwrite)"))
	}
	if j.Size < 0 || j.Offset < 0 || j.Rate < 0 || j.OnSize < 0 || j.Runtime < 0 || j.OffTime < 0 {
		errs = append(errs, fmt.Errorf("sizes, rates and durations cannot be negative"))
	}
	if j.TimeBased && j.Runtime == 0 {
		errs = append(errs, fmt.Errorf("--time-based needs --runtime"))
	}
	if j.OnSize > 0 && j.Runtime == 0 {
		errs = append(errs, fmt.Errorf("--on needs --runtime (the on/off schedule repeats until then)"))
	}
	if j.OffTime > 0 && j.OnSize == 0 {
		errs = append(errs, fmt.Errorf("--off needs --on (how much each thread moves per burst)"))
	}
	if j.Verify && j.OnSize > 0 {
		errs = append(errs, fmt.Errorf("--verify cannot be combined with --on/--off"))
	}
	if j.Verify && j.BlockSize > 0 && j.BlockSize < MinVerifyBlock {
		errs = append(errs, fmt.Errorf("--verify needs --bs of at least %d bytes", MinVerifyBlock))
	}
	if j.Verify && j.TimeBased {
		errs = append(errs, fmt.Errorf("--verify cannot be combined with --time-based (it checks one pass)"))
	}
	return errors.Join(errs...)
}

// Region is the byte range of the LUN one thread works on.
type Region struct {
	Start, Len int64
}

// Regions splits the LUN among the threads: each thread gets Size bytes (or
// an equal share of what lies after Offset when Size is 0), rounded down to
// whole blocks, laid out one after the other from Offset. A LUN too small
// for that is an error that says what would fit.
func (j Job) Regions(capacity int64) ([]Region, error) {
	avail := capacity - j.Offset
	if avail < j.BlockSize*int64(j.Threads) {
		return nil, fmt.Errorf("the LUN holds %s after --offset %s, too small for %d thread(s) of --bs %s",
			FormatSize(max(avail, 0)), FormatSize(j.Offset), j.Threads, FormatSize(j.BlockSize))
	}
	per := j.Size
	if per == 0 {
		per = avail / int64(j.Threads)
	}
	per -= per % j.BlockSize
	if per == 0 {
		return nil, fmt.Errorf("--size %s is smaller than one block (--bs %s)", FormatSize(j.Size), FormatSize(j.BlockSize))
	}
	if per*int64(j.Threads) > avail {
		return nil, fmt.Errorf("%d thread(s) × --size %s need %s but the LUN holds %s after --offset %s; lower --size or --threads (most per thread: %s)",
			j.Threads, FormatSize(j.Size), FormatSize(per*int64(j.Threads)), FormatSize(avail), FormatSize(j.Offset),
			FormatSize(avail/int64(j.Threads)-avail/int64(j.Threads)%j.BlockSize))
	}
	rs := make([]Region, j.Threads)
	for i := range rs {
		rs[i] = Region{Start: j.Offset + int64(i)*per, Len: per}
	}
	return rs, nil
}

// String renders the job as fio-like key=value pairs for logs.
func (j Job) String() string {
	s := fmt.Sprintf("%s: rw=%s bs=%s size=%s threads=%d", j.Name, j.Mode, FormatSize(j.BlockSize), FormatSize(j.Size), j.Threads)
	if j.Depth() > 1 {
		s += fmt.Sprintf(" iodepth=%d", j.Depth())
	}
	if j.Fsync > 0 {
		s += fmt.Sprintf(" fsync=%d", j.Fsync)
	}
	if j.Rate > 0 {
		s += " rate=" + FormatSize(j.Rate) + "/s"
	}
	if j.Runtime > 0 {
		s += " runtime=" + j.Runtime.String()
	}
	if j.TimeBased {
		s += " time_based"
	}
	if j.OnSize > 0 {
		s += fmt.Sprintf(" on=%s off=%s", FormatSize(j.OnSize), j.OffTime)
	}
	if j.Verify {
		s += " verify"
	}
	return s
}

// Flags binds the job's fields to flags on fs, so that flags given on the
// command line override a preset applied afterwards with ApplyFlags.
type Flags struct {
	fs                         *flag.FlagSet
	job, name                  string
	mode                       string
	bs, size, offset, rate, on sizeFlag
	threads, iodepth, fsync    int
	runtime, off               time.Duration
	timeBased, verify          bool
	seed                       int64
}

// BindFlags registers the job flags on fs.
func BindFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	fs.StringVar(&f.job, "job", "", "start from a preset (thesis Appendix D); other flags override its fields:\n"+PresetHelp())
	fs.StringVar(&f.name, "name", "", "job name in the output lines (default: the preset's name, or \"job\")")
	fs.StringVar(&f.mode, "rw", string(Default.Mode), "access pattern: read, write, randread or randwrite")
	fs.Var(&f.bs, "bs", "block size of each I/O, e.g. 8k, 64k (k, m, g are powers of 1024 as in fio) (default 64k)")
	fs.Var(&f.size, "size", "bytes each thread moves per pass, e.g. 128m, 2g; each thread gets its own region of this size (default: the LUN split among threads)")
	fs.Var(&f.offset, "offset", "where the first thread's region starts on the LUN (default 0)")
	fs.Var(&f.rate, "rate", "per-thread limit in bytes/s, e.g. 256k, paced evenly like fio's rate= (default: unlimited)")
	fs.IntVar(&f.threads, "threads", Default.Threads, "I/O threads; each has its own iSCSI session (TCP connection) and --iodepth I/Os in flight")
	fs.IntVar(&f.iodepth, "iodepth", 1, fmt.Sprintf("I/Os each thread keeps outstanding on its connection, 1 to %d: 1 is one synchronous I/O at a time (fio's sync engine), more use libiscsi's (libnfs's) asynchronous calls like fio's libaio iodepth=", MaxIODepth))
	fs.IntVar(&f.fsync, "fsync", 0, "with a write mode: flush after every N writes of a thread, like fio's fsync=N (SYNCHRONIZE CACHE on a LUN; over NFS the writes become UNSTABLE and each flush a COMMIT); 0: never")
	fs.DurationVar(&f.runtime, "runtime", 0, "stop after this long, e.g. 60s (default: when --size is done)")
	fs.BoolVar(&f.timeBased, "time-based", false, "repeat passes over the region until --runtime, like fio's time_based")
	fs.Var(&f.on, "on", "on/off schedule: all threads start together and each moves this much, e.g. 64m, then they pause --off; repeats until --runtime")
	fs.DurationVar(&f.off, "off", 0, "pause between on/off bursts, e.g. 5s (thesis Fig. 5.9)")
	fs.BoolVar(&f.verify, "verify", false, "with a write mode: write a checksummed pattern, then read it back and count mismatches; with a read mode: check data an earlier --verify write left")
	fs.Int64Var(&f.seed, "seed", Default.Seed, "seed of random offsets and of the verify pattern")
	return f
}

// Job returns the job the flags describe: the preset named by --job (or
// Default) with every flag the user set applied on top.
func (f *Flags) Job() (Job, error) {
	j := Default
	if f.job != "" {
		p, err := Preset(f.job)
		if err != nil {
			return Job{}, err
		}
		j = p
	}
	depthGiven := false
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "name":
			j.Name = f.name
		case "rw":
			j.Mode = Mode(f.mode)
		case "bs":
			j.BlockSize = f.bs.n
		case "size":
			j.Size = f.size.n
		case "offset":
			j.Offset = f.offset.n
		case "rate":
			j.Rate = f.rate.n
		case "threads":
			j.Threads = f.threads
		case "iodepth":
			j.IODepth = f.iodepth
			depthGiven = true
		case "fsync":
			j.Fsync = f.fsync
		case "runtime":
			j.Runtime = f.runtime
		case "time-based":
			j.TimeBased = f.timeBased
		case "on":
			j.OnSize = f.on.n
		case "off":
			j.OffTime = f.off
		case "verify":
			j.Verify = f.verify
		case "seed":
			j.Seed = f.seed
		}
	})
	if depthGiven && j.IODepth == 0 {
		// In a Job, 0 is "unset" (one I/O); on the command line it is a
		// mistake.
		return Job{}, fmt.Errorf("--iodepth 0: want 1 to %d I/Os outstanding per thread", MaxIODepth)
	}
	if err := j.Validate(); err != nil {
		return Job{}, err
	}
	return j, nil
}

type sizeFlag struct{ n int64 }

func (s *sizeFlag) String() string {
	if s == nil || s.n == 0 {
		return ""
	}
	return FormatSize(s.n)
}

func (s *sizeFlag) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	s.n = n
	return nil
}
