package blkprobe

import (
	"fmt"
	"sync"
	"time"
)

// Sampler is what a control loop needs of the probe; *Probe and *Fake
// implement it.
type Sampler interface {
	Sample(now time.Time) (Snapshot, error)
	Close() error
}

var (
	_ Sampler = (*Probe)(nil)
	_ Sampler = (*Fake)(nil)
)

// Fake is a Sampler whose I/O the test writes: for unit tests of code that
// reads the probe, without a kernel.
type Fake struct {
	mu   sync.Mutex
	devs map[string]*Device
	// Err, when set, is returned by the next Samples.
	Err error
}

// NewFake returns a Fake watching the named devices, with nothing counted.
func NewFake(devices ...string) *Fake {
	f := &Fake{devs: map[string]*Device{}}
	for _, d := range devices {
		f.devs[d] = &Device{Name: d}
	}
	return f
}

// Complete counts one completed request of dev with the given latency.
func (f *Fake) Complete(dev string, write bool, latency time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.dev(dev)
	o := &d.Read
	if write {
		o = &d.Write
	}
	o.Count++
	o.Sum += latency
	o.Hist.Add(latency)
}

// SetOutstanding sets the reads in flight on dev and the oldest one's age.
func (f *Fake) SetOutstanding(dev string, n int, oldest time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.dev(dev)
	d.ReadsInFlight, d.OldestRead = n, oldest
}

func (f *Fake) dev(name string) *Device {
	d, ok := f.devs[name]
	if !ok {
		panic(fmt.Sprintf("blkprobe.Fake: device %q not watched", name))
	}
	return d
}

// Sample returns the cumulative counts, like Probe.Sample.
func (f *Fake) Sample(now time.Time) (Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Err != nil {
		return Snapshot{}, f.Err
	}
	s := Snapshot{At: now, Devices: make(map[string]Device, len(f.devs))}
	for n, d := range f.devs {
		s.Devices[n] = *d
	}
	return s, nil
}

// Close does nothing.
func (f *Fake) Close() error { return nil }
