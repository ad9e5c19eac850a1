package diskemu

import (
	"fmt"
	"strings"

	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

// newArrayModel returns the internal/sim/diskmodel array for a profile name.
func newArrayModel(profile string, seed int64) (Model, error) {
	p, err := diskmodel.ProfileByName(profile)
	if err != nil {
		return nil, fmt.Errorf("%w; or fixed:DURATION such as fixed:5ms", err)
	}
	return diskmodel.New(p, seed), nil
}

// ProfileNames lists the profiles NewModel accepts, for --help texts.
func ProfileNames() string {
	return strings.Join(diskmodel.Profiles(), ", ") + ", fixed:DURATION"
}

// regionFor picks the per-file region size: 64 GiB (far larger than a lab
// image, so regions never overlap), but no more than an eighth of the
// array, so eight images fit before the address space wraps, and a whole
// number of stripes, so every image starts on the same spindle boundary as
// an LV would.
func regionFor(m Model) int64 {
	const max = 64 << 30
	a, ok := m.(interface{ Profile() diskmodel.Profile })
	if !ok {
		return max
	}
	p := a.Profile()
	r := min(int64(max), p.Capacity()/8)
	if p.StripeBytes > 0 && p.Spindles > 0 {
		unit := p.StripeBytes * int64(p.Spindles)
		r -= r % unit
	}
	if r <= 0 {
		return max
	}
	return r
}
