// Package diskstats reads /proc/diskstats, the kernel's per-block-device I/O
// counters, and turns two snapshots into per-interval values (reads, read
// milliseconds, r_await, write rates). It is the observe step of sanqos: the
// read latency of a resource is computed from these counters every tick.
//
// Every kernel format is accepted: 14 fields (kernel ≤ 4.18), 18 fields
// (4.18+, discards) and 20 fields (5.5+, flushes). Each Stat records how
// many fields its line had. A malformed line is skipped and reported with
// its line number; it never stops the read of the other devices.
package diskstats

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Stat is one line of /proc/diskstats. Counters are cumulative since the
// device appeared; times are in milliseconds, sizes in 512-byte sectors
// (the kernel's unit in this file whatever the device's sector size).
type Stat struct {
	Major, Minor uint32
	Device       string
	// Fields is how many fields the line had (14, 18 or 20); the counters
	// the line did not have are zero.
	Fields int

	ReadIOs, ReadMerges, ReadSectors, ReadTicks     uint64
	WriteIOs, WriteMerges, WriteSectors, WriteTicks uint64
	InProgress, IOTicks, WeightedIOTicks            uint64
	// Kernel 4.18+ (18 fields).
	DiscardIOs, DiscardMerges, DiscardSectors, DiscardTicks uint64
	// Kernel 5.5+ (20 fields).
	FlushIOs, FlushTicks uint64
}

// LineError says which line of the file could not be parsed and why.
type LineError struct {
	Line int    // 1-based
	Text string // the line, truncated to 120 bytes
	Err  error
}

func (e LineError) Error() string {
	return fmt.Sprintf("diskstats line %d %q: %v", e.Line, e.Text, e.Err)
}

func (e LineError) Unwrap() error { return e.Err }

// FS reads diskstats below a proc root. It keeps the file open, a read
// buffer and a table of device names between reads, so it is not safe for
// concurrent use.
type FS struct {
	path string
	f    *os.File
	buf  []byte
	p    Parser
}

// NewFS returns a reader of procRoot/diskstats; procRoot is "/proc" on a
// live system and a testdata directory in tests.
func NewFS(procRoot string) *FS {
	return &FS{path: filepath.Join(procRoot, "diskstats")}
}

// Path is the file the reader reads.
func (fs *FS) Path() string { return fs.path }

// Close closes the kept file; a later Read opens it again.
func (fs *FS) Close() error {
	if fs.f == nil {
		return nil
	}
	err := fs.f.Close()
	fs.f = nil
	return err
}

// Read reads the file in one go and parses it into a new slice. Lines that
// could not be parsed are returned in the LineError list and skipped; the
// error is non-nil only when the file could not be read at all.
func (fs *FS) Read() ([]Stat, []LineError, error) {
	return fs.ReadInto(nil)
}

// ReadInto is Read appending into dst[:0], so that a caller that reads
// every tick can reuse one slice.
func (fs *FS) ReadInto(dst []Stat) ([]Stat, []LineError, error) {
	if err := fs.load(); err != nil {
		return dst[:0], nil, err
	}
	stats, bad := fs.p.Parse(dst[:0], fs.buf)
	return stats, bad, nil
}

// load reads the whole file into fs.buf. The file is opened once and
// re-read from offset 0 (procfs regenerates it on every read from the
// start): a daemon that runs out of descriptors, to a flood of
// connections say, must still see its disks. After a read error it is
// reopened at the next call. Pseudo-files report a size of 0 or 4096
// whatever they hold, so the size from stat is not trusted: the buffer
// grows until a read returns EOF.
func (fs *FS) load() error {
	if fs.f == nil {
		f, err := os.Open(fs.path)
		if err != nil {
			return fmt.Errorf("opening %s: %w", fs.path, err)
		}
		fs.f = f
	}
	if cap(fs.buf) == 0 {
		// About 100 bytes a device: 64 KiB holds some 600 devices in one
		// read; the buffer grows (once) on bigger machines.
		fs.buf = make([]byte, 0, 64<<10)
	}
	fs.buf = fs.buf[:0]
	for {
		if len(fs.buf) == cap(fs.buf) {
			fs.buf = append(fs.buf, 0)[:len(fs.buf)]
		}
		n, err := fs.f.ReadAt(fs.buf[len(fs.buf):cap(fs.buf)], int64(len(fs.buf)))
		fs.buf = fs.buf[:len(fs.buf)+n]
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			fs.Close()
			return fmt.Errorf("reading %s: %w", fs.path, err)
		}
	}
}

// parse parses diskstats text from r (the procfs-style private parser).
func parse(r io.Reader) ([]Stat, []LineError, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, fmt.Errorf("reading diskstats: %w", err)
	}
	var p Parser
	stats, bad := p.Parse(nil, data)
	return stats, bad, nil
}

// Parser parses diskstats text. It interns device names, so that parsing
// the same devices every tick allocates no strings; the zero value is ready
// to use. Not safe for concurrent use.
type Parser struct {
	names map[string]string
	// last holds the device names of the previous Parse in line order:
	// the kernel lists devices in a stable order, so comparing with the
	// name at the same position avoids most map lookups.
	last []string
}

// maxFields is the most numbers a line carries after the device name.
const maxFields = 17

// Parse appends the devices of data to dst and returns it with the lines it
// skipped. Empty lines are ignored silently.
func (p *Parser) Parse(dst []Stat, data []byte) ([]Stat, []LineError) {
	if p.names == nil {
		p.names = make(map[string]string)
	}
	var bad []LineError
	var nums [maxFields]uint64
	line := 0
	first := len(dst)
	defer func() {
		// Twice the devices listed plus 1024 lets loop and dm devices come
		// and go for a long while before the table is rebuilt.
		if len(p.names) > 2*(len(dst)-first)+1024 {
			// Devices come and go (loop devices, dm): drop the names of
			// devices no longer listed so the table stays bounded.
			clear(p.names)
			for i := first; i < len(dst); i++ {
				p.names[dst[i].Device] = dst[i].Device
			}
		}
		p.last = p.last[:0]
		for i := first; i < len(dst); i++ {
			p.last = append(p.last, dst[i].Device)
		}
	}()
	for len(data) > 0 {
		line++
		var l []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i], data[i+1:]
		} else {
			l, data = data, nil
		}
		s, err := p.parseLine(l, &nums, len(dst)-first)
		if err == errEmpty {
			continue
		}
		if err != nil {
			bad = append(bad, LineError{Line: line, Text: truncate(l), Err: err})
			continue
		}
		dst = append(dst, s)
	}
	return dst, bad
}

var errEmpty = errors.New("empty line")

// truncate shortens a bad line for an error message: 120 bytes show a
// diskstats line's name and first fields without flooding the log.
func truncate(l []byte) string {
	if len(l) > 120 {
		l = l[:120]
	}
	return string(l)
}

// parseLine parses "major minor name n1 … nk" with k = 11, 15 or 17.
func (p *Parser) parseLine(l []byte, nums *[maxFields]uint64, pos int) (Stat, error) {
	var s Stat
	field := 0 // index of the field being read
	var name []byte
	for {
		// Skip blanks.
		for len(l) > 0 && isBlank(l[0]) {
			l = l[1:]
		}
		if len(l) == 0 {
			break
		}
		if field == 2 {
			end := 0
			for end < len(l) && !isBlank(l[end]) {
				end++
			}
			name, l = l[:end], l[end:]
			field++
			continue
		}
		if field-3 >= maxFields {
			return s, fmt.Errorf("more than %d fields", maxFields+3)
		}
		v, n, ok := leadingUint(l)
		if !ok {
			return s, fmt.Errorf("field %d %q is not a 64-bit unsigned integer", field+1, token(l))
		}
		l = l[n:]
		switch field {
		case 0, 1:
			if v > 1<<32-1 {
				return s, fmt.Errorf("device number %d does not fit in 32 bits", v)
			}
			if field == 0 {
				s.Major = uint32(v)
			} else {
				s.Minor = uint32(v)
			}
		default:
			nums[field-3] = v
		}
		field++
	}
	switch field {
	case 0:
		return s, errEmpty
	case 14, 18, 20:
	default:
		return s, fmt.Errorf("%d fields, want 14, 18 or 20", field)
	}
	s.Fields = field
	s.Device = p.intern(name, pos)
	s.setCounters(nums, field)
	return s, nil
}

// leadingUint reads the decimal number that starts l and runs to the next
// blank, in one pass, and says how many bytes it took. Overflow is checked
// on the value, not the number of digits, so that zero-padded numbers
// parse as strconv does; the comparison against maxDiv10 costs no
// division.
func leadingUint(l []byte) (v uint64, n int, ok bool) {
	for ; n < len(l) && !isBlank(l[n]); n++ {
		d := uint64(l[n]) - '0'
		if d > 9 || v > maxDiv10 || (v == maxDiv10 && d > maxMod10) {
			return 0, n, false
		}
		v = v*10 + d
	}
	return v, n, true
}

// intern returns the device name as a string without allocating when the
// line at pos of the last read had it, or it was seen before.
func (p *Parser) intern(name []byte, pos int) string {
	if pos < len(p.last) && p.last[pos] == string(name) {
		return p.last[pos]
	}
	if n, ok := p.names[string(name)]; ok {
		return n
	}
	n := string(name)
	p.names[n] = n
	return n
}

// setCounters copies the counters of a line with fields fields.
func (s *Stat) setCounters(nums *[maxFields]uint64, fields int) {
	s.ReadIOs, s.ReadMerges, s.ReadSectors, s.ReadTicks = nums[0], nums[1], nums[2], nums[3]
	s.WriteIOs, s.WriteMerges, s.WriteSectors, s.WriteTicks = nums[4], nums[5], nums[6], nums[7]
	s.InProgress, s.IOTicks, s.WeightedIOTicks = nums[8], nums[9], nums[10]
	if fields >= 18 {
		s.DiscardIOs, s.DiscardMerges, s.DiscardSectors, s.DiscardTicks = nums[11], nums[12], nums[13], nums[14]
	}
	if fields >= 20 {
		s.FlushIOs, s.FlushTicks = nums[15], nums[16]
	}
}

// maxDiv10 and maxMod10 split 2^64−1: v*10+d overflows exactly when v >
// maxDiv10, or v == maxDiv10 and d > maxMod10.
const (
	maxDiv10 = (1<<64 - 1) / 10
	maxMod10 = (1<<64 - 1) % 10
)

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }

// token is l up to its first blank, for error messages.
func token(l []byte) []byte {
	for i, c := range l {
		if isBlank(c) {
			return l[:i]
		}
	}
	return l
}
