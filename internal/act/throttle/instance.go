package throttle

import (
	"github.com/sanqos/sanqos/internal/act/nfqbackend"
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
	return nfqbackend.Instance(o.QueueNum)
}
