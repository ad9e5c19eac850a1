package throttle

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/fielderr"
)

// Validate reports every option Open would refuse, each as a
// *fielderr.Error, so that a caller can check its options before it
// opens anything and name its own keys.
func (o Options) Validate() error {
	var errs []error
	bad := func(field, name string, v any, want string) {
		errs = append(errs, fielderr.New("throttle.Options."+field, name, v, want))
	}
	if o.Backend != "" && o.Backend != Auto && !slices.Contains(Backends, o.Backend) {
		bad("Backend", "backend", strconv.Quote(o.Backend), "must be one of "+quoted(append(slices.Clone(Backends), Auto)))
	}
	for _, d := range []struct{ field, name, v string }{{"Dev", "dev", o.Dev}, {"RateDev", "rate dev", o.RateDev}} {
		if d.v != "" && !ValidIfName(d.v) {
			bad(d.field, d.name, strconv.Quote(d.v), `must be a network interface name (1 to 15 characters, no '/', ':' or blanks), like "eth0"`)
		}
	}
	switch o.Backend {
	case "netem", "htb", "edt":
		if o.Dev == "" {
			bad("Dev", "dev", `""`, fmt.Sprintf("backend %q installs its qdisc on the interface towards the initiators (--dev): give it, like \"eth0\"", o.Backend))
		}
	case "dry-run":
	}
	if o.RateDev != "" && (o.Backend == "htb" || o.Backend == "dry-run") {
		bad("RateDev", "rate dev", strconv.Quote(o.RateDev), fmt.Sprintf("adds read rates to a delay backend (nfqueue or netem); backend %q needs none", o.Backend))
	}
	if err := plan.CheckSmall(o.SmallSegment); err != nil {
		bad("SmallSegment", "small segment", o.SmallSegment, err.Error())
	}
	if err := plan.ValidateSmallSegments(o.SmallSegments); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// CapsRates reports whether the data path o opens can cap read rates:
// an htb backend (or the dry run, which caps nothing for real), or a
// delay backend with an htb beside it on RateDev.
func (o Options) CapsRates() bool {
	return o.RateDev != "" || o.Backend == "htb" || o.Backend == "dry-run"
}

// QueueNum is n as an NFQUEUE number: 1 to 65535 (0 is Options' "the
// default", never a queue a user names).
func QueueNum(n int) (uint16, error) {
	if n < 1 || n > 65535 {
		return 0, fielderr.New("throttle.Options.QueueNum", "queue number", n, "must be a queue number from 1 to 65535")
	}
	return uint16(n), nil
}

// ValidIfName reports whether s can name a Linux network interface
// (dev_valid_name): at most IFNAMSIZ-1 bytes, not "." or "..", and no
// '/', ':' or white space.
func ValidIfName(s string) bool {
	if len(s) == 0 || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	return !strings.ContainsAny(s, "/: \t\n\r\v\f")
}

func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
