package blkprobe

import (
	"errors"
	"fmt"
	"time"
)

// Device is what the probe knows of one watched device at a sample.
type Device struct {
	Name         string // as in /proc/diskstats
	Major, Minor uint32

	// Read and Write are cumulative since Open (Sub gives a tick's).
	Read, Write Ops

	// OldestRead is the age, at the sample, of the oldest read issued to
	// the device and not yet completed; 0 when none is outstanding. It may
	// miss reads counted in Untracked, never overstates.
	OldestRead time.Duration
	// ReadsInFlight is the number of outstanding reads the slot table
	// holds (all of them unless Untracked grows).
	ReadsInFlight int
	// Untracked counts reads that found no free slot (cumulative): while
	// it grows, OldestRead may be too young.
	Untracked uint64
	// Untimed counts completions without the block layer's start stamp
	// (cumulative): the queue keeps no I/O statistics (queue/iostats 0)
	// and has no scheduler. They are missing from Read and Write.
	Untimed uint64
}

// Sub returns the tick from prev to d: counters as differences, the gauges
// (OldestRead, ReadsInFlight) as of d.
func (d Device) Sub(prev Device) Device {
	out := d
	out.Read = d.Read.Sub(prev.Read)
	out.Write = d.Write.Sub(prev.Write)
	out.Untracked = d.Untracked - prev.Untracked
	out.Untimed = d.Untimed - prev.Untimed
	return out
}

// Snapshot is one Sample of every watched device.
type Snapshot struct {
	At      time.Time
	Devices map[string]Device
}

// Sub returns the tick from prev to s for every device in s; a device
// missing from prev is taken from zero.
func (s Snapshot) Sub(prev Snapshot) Snapshot {
	out := Snapshot{At: s.At, Devices: make(map[string]Device, len(s.Devices))}
	for name, d := range s.Devices {
		out.Devices[name] = d.Sub(prev.Devices[name])
	}
	return out
}

// ErrUnavailable is matched (errors.Is) by every error of Open that means
// "eBPF cannot be used here": the caller should fall back to
// /proc/diskstats. The error's text says why.
var ErrUnavailable = errors.New("eBPF block-latency probe unavailable")

// UnavailableError says why the probe cannot run.
type UnavailableError struct {
	Reason string // short: "no kernel BTF", "no permission", "kernel too old", …
	Err    error
}

func (e *UnavailableError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%v: %s", ErrUnavailable, e.Reason)
	}
	return fmt.Sprintf("%v: %s: %v", ErrUnavailable, e.Reason, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }
