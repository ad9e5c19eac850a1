package diskemu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"time"

	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

// Stats is a snapshot of the server's counters since mount. It is also the
// JSON document written to Options.StatsPath.
type Stats struct {
	Time    time.Time `json:"time"`
	Profile string    `json:"profile"`
	IOStats
	// MaxInFlight is the deepest queue seen since mount.
	MaxInFlight int64       `json:"max_in_flight"`
	Files       []FileStats `json:"files"`
	// Model is the array model's own view (spindle operations, sequential
	// share, writes that found the cache full, bus time), when it has one.
	Model *diskmodel.Stats `json:"model,omitempty"`
}

// IOStats are the counters kept for the mount and for each file.
type IOStats struct {
	Reads      uint64 `json:"reads"`
	Writes     uint64 `json:"writes"`
	ReadBytes  uint64 `json:"read_bytes"`
	WriteBytes uint64 `json:"write_bytes"`
	Fsyncs     uint64 `json:"fsyncs"`
	// InFlight is the number of READ/WRITE requests between arrival and
	// reply right now: the emulated device's queue depth.
	InFlight int64 `json:"in_flight"`
	// Mean model service time (completion - arrival) and mean latency
	// actually seen by the kernel (reply - arrival); the difference is the
	// FUSE path's own overhead.
	ReadServiceMs  float64 `json:"read_service_ms"`
	WriteServiceMs float64 `json:"write_service_ms"`
	ReadLatencyMs  float64 `json:"read_latency_ms"`
	WriteLatencyMs float64 `json:"write_latency_ms"`
	// BackingMs is the mean time of the real pread/pwrite on the backing
	// file; a request replies late when this exceeds its service time.
	BackingMs float64 `json:"backing_ms"`
}

// FileStats are the counters of one file (one LUN image).
type FileStats struct {
	Name string `json:"name"`
	// RegionOffset is where the file starts in the model's address space.
	RegionOffset int64 `json:"region_offset"`
	IOStats
}

// counters are updated lock-free on the I/O path.
type counters struct {
	reads, writes, readBytes, writeBytes, fsyncs  atomic.Uint64
	readSvc, writeSvc, readLat, writeLat, backing atomic.Int64 // sums in ns
	inFlight                                      atomic.Int64
}

func (c *counters) begin() { c.inFlight.Add(1) }

func (c *counters) end(op Op, n int, svc, lat, backing time.Duration) {
	c.inFlight.Add(-1)
	c.backing.Add(int64(backing))
	if op == Write {
		c.writes.Add(1)
		c.writeBytes.Add(uint64(n))
		c.writeSvc.Add(int64(svc))
		c.writeLat.Add(int64(lat))
		return
	}
	c.reads.Add(1)
	c.readBytes.Add(uint64(n))
	c.readSvc.Add(int64(svc))
	c.readLat.Add(int64(lat))
}

func meanMs(sumNs int64, n uint64) float64 {
	if n == 0 {
		return 0
	}
	return float64(sumNs) / float64(n) / 1e6
}

func (c *counters) snapshot() IOStats {
	s := IOStats{
		Reads:      c.reads.Load(),
		Writes:     c.writes.Load(),
		ReadBytes:  c.readBytes.Load(),
		WriteBytes: c.writeBytes.Load(),
		Fsyncs:     c.fsyncs.Load(),
		InFlight:   c.inFlight.Load(),
	}
	s.ReadServiceMs = meanMs(c.readSvc.Load(), s.Reads)
	s.WriteServiceMs = meanMs(c.writeSvc.Load(), s.Writes)
	s.ReadLatencyMs = meanMs(c.readLat.Load(), s.Reads)
	s.WriteLatencyMs = meanMs(c.writeLat.Load(), s.Writes)
	s.BackingMs = meanMs(c.backing.Load(), s.Reads+s.Writes)
	return s
}

// writeStatsFile replaces path atomically so a reader never sees half a
// document.
func writeStatsFile(path string, s Stats) error {
	sort.Slice(s.Files, func(i, j int) bool { return s.Files[i].Name < s.Files[j].Name })
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding stats: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".sanqos-diskemu-stats-*")
	if err != nil {
		return fmt.Errorf("writing stats: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("writing stats %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing stats %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("replacing stats file %s: %w", path, err)
	}
	return nil
}
