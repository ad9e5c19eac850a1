package throttle

import (
	"fmt"

	"github.com/sanqos/sanqos/internal/act/owned"
)

// DefaultInstance is the instance name a backend takes when none is
// given: nfqueue instances are told apart by their queue (two cannot bind
// one queue anyway), tc instances by their device (one root qdisc each).
func DefaultInstance(o Options) string {
	switch o.Backend {
	case "netem", "htb", "edt":
		return owned.DevInstance(o.Dev)
	}
	q := o.QueueNum
	if q == 0 {
		q = DefaultQueueNum
	}
	return fmt.Sprintf("q%d", q)
}
