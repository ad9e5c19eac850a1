package throttle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/sanqos/sanqos/internal/act/owned"
)

// DefaultInstance is the instance name a backend takes when none is
// given: nfqueue instances are told apart by their queue (two cannot bind
// one queue anyway), tc instances by their device (one root qdisc each).
func DefaultInstance(o Options) string {
	switch o.Backend {
	case "netem", "htb", "edt":
		var b strings.Builder
		b.WriteByte('t')
		for _, r := range strings.ToLower(o.Dev) {
			if (r >= 'a' && r <= 'z' || r >= '0' && r <= '9') && b.Len() < owned.MaxInstance {
				b.WriteRune(r)
			}
		}
		if b.Len() < 2 || len(o.Dev) > owned.MaxInstance-1 {
			// Too long to spell out: a hash keeps distinct devices apart.
			sum := sha256.Sum256([]byte(o.Dev))
			return "t" + hex.EncodeToString(sum[:])[:owned.MaxInstance-1]
		}
		return b.String()
	}
	q := o.QueueNum
	if q == 0 {
		q = DefaultQueueNum
	}
	return fmt.Sprintf("q%d", q)
}
