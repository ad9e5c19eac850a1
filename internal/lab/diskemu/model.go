package diskemu

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

// Op is the direction of one request submitted to a Model; it is
// internal/sim/diskmodel's, so *diskmodel.Array is a Model as it is.
type Op = diskmodel.Op

// The two directions, re-exported so that callers need not import diskmodel.
const (
	Read  = diskmodel.Read
	Write = diskmodel.Write
)

// Model decides when a request submitted at now completes. offset is in the
// array's address space (file region base + file offset); stream identifies
// the file so a model can recognise sequential streams. Implementations must
// be safe for concurrent use: the FUSE server calls Submit from many
// goroutines at once.
type Model interface {
	Submit(now time.Time, op Op, offset, length int64, stream uint64) time.Time
}

// FixedModel is one FIFO server with a constant service time per request,
// whatever its size or position. It is the calibration profile: a single
// synchronous reader sees exactly Service per request, and concurrent
// requests queue behind each other.
type FixedModel struct {
	Service time.Duration

	mu   sync.Mutex
	busy time.Time // when the server finishes the last accepted request
}

// Submit implements Model.
func (m *FixedModel) Submit(now time.Time, _ Op, _, _ int64, _ uint64) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := now
	if m.busy.After(start) {
		start = m.busy
	}
	m.busy = start.Add(m.Service)
	return m.busy
}

// NewModel returns the model for a profile name: "fixed:DURATION" (e.g.
// "fixed:5ms") for FixedModel, otherwise a profile of internal/sim/diskmodel
// ("thesis-2010", "ssd", "ram").
func NewModel(profile string, seed int64) (Model, error) {
	if rest, ok := strings.CutPrefix(profile, "fixed:"); ok {
		d, err := time.ParseDuration(rest)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("profile %q: want fixed:DURATION such as fixed:5ms", profile)
		}
		return &FixedModel{Service: d}, nil
	}
	return newArrayModel(profile, seed)
}
