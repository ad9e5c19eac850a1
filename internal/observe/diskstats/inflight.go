package diskstats

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// InFlight reads how many reads and writes a block device has in flight
// now, from sysfs (class/block/DEV/inflight: "reads writes"). /proc/
// diskstats has only the sum of both, and a tick in which no read
// completed needs to know whether reads are waiting (internal/decide/control,
// step 1 "Signal"). Each device's file is opened once and re-read in place,
// so a sample costs one pread. Not safe for concurrent use.
type InFlight struct {
	root  string
	files map[string]*os.File
	buf   [64]byte
}

// NewInFlight returns a reader below sysRoot ("/sys" on a live system, a
// testdata directory in tests).
func NewInFlight(sysRoot string) *InFlight {
	return &InFlight{root: sysRoot, files: map[string]*os.File{}}
}

// ReadsInFlight is the device's reads in flight; ok is false when the
// file cannot be read or parsed (the device went away, or an old kernel
// has no such file), and the next call tries to open it again.
func (f *InFlight) ReadsInFlight(device string) (uint64, bool) {
	r, _, err := f.Read(device)
	return r, err == nil
}

// Read returns the device's reads and writes in flight.
func (f *InFlight) Read(device string) (reads, writes uint64, err error) {
	file, ok := f.files[device]
	if !ok {
		// Names with a slash in /proc/diskstats (cciss/c0d0) have a "!"
		// in sysfs.
		path := filepath.Join(f.root, "class", "block", strings.ReplaceAll(device, "/", "!"), "inflight")
		if file, err = os.Open(path); err != nil {
			return 0, 0, fmt.Errorf("opening %s: %w", path, err)
		}
		f.files[device] = file
	}
	n, err := file.ReadAt(f.buf[:], 0)
	if n == 0 && err != nil {
		f.forget(device)
		return 0, 0, fmt.Errorf("reading %s: %w", file.Name(), err)
	}
	reads, writes, err = parseInFlight(f.buf[:n])
	if err != nil {
		f.forget(device)
		return 0, 0, fmt.Errorf("%s: %w", file.Name(), err)
	}
	return reads, writes, nil
}

// parseInFlight parses "   reads   writes\n".
func parseInFlight(b []byte) (reads, writes uint64, err error) {
	fields := bytes.Fields(b)
	if len(fields) != 2 {
		return 0, 0, fmt.Errorf("inflight %q: want two counts", b)
	}
	if reads, err = strconv.ParseUint(string(fields[0]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("inflight reads %q: %w", fields[0], err)
	}
	if writes, err = strconv.ParseUint(string(fields[1]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("inflight writes %q: %w", fields[1], err)
	}
	return reads, writes, nil
}

func (f *InFlight) forget(device string) {
	if file, ok := f.files[device]; ok {
		file.Close()
		delete(f.files, device)
	}
}

// Close closes every open file.
func (f *InFlight) Close() error {
	for d := range f.files {
		f.forget(d)
	}
	return nil
}

// InFlightSnapshot is the reads in flight of a snapshot's devices, read
// from sysfs once per tick right after /proc/diskstats, so that whoever
// decides on the tick looks at one sample and reads no device while it
// decides. Not safe for concurrent use.
type InFlightSnapshot struct {
	src   *InFlight
	reads map[string]uint64
}

// NewInFlightSnapshot returns a snapshot that samples src.
func NewInFlightSnapshot(src *InFlight) *InFlightSnapshot {
	return &InFlightSnapshot{src: src, reads: map[string]uint64{}}
}

// Sample replaces the snapshot with the reads in flight of snap's
// devices now. A device with nothing in progress has no read in flight
// and costs no read; one whose sysfs file cannot be read is left out.
func (s *InFlightSnapshot) Sample(snap []Stat) {
	clear(s.reads)
	for i := range snap {
		st := &snap[i]
		if st.InProgress == 0 {
			s.reads[st.Device] = 0
			continue
		}
		if r, _, err := s.src.Read(st.Device); err == nil {
			s.reads[st.Device] = r
		}
	}
}

// ReadsInFlight is the device's reads in flight at the last Sample; ok
// is false when it was not sampled or could not be read.
func (s *InFlightSnapshot) ReadsInFlight(device string) (uint64, bool) {
	n, ok := s.reads[device]
	return n, ok
}

// Close closes the sysfs files.
func (s *InFlightSnapshot) Close() error { return s.src.Close() }
