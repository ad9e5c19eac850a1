package throttle

import (
	"fmt"
	"strings"
)

// Auto is the backend name that chooses edt where the kernel and the
// options allow it and nfqueue elsewhere (ChooseBackend). Open does not
// take it: the caller resolves it first, so that it can say what it
// chose and why.
const Auto = "auto"

// EDTFeatures are the kernel parts the edt backend needs, in the order
// ChooseBackend asks for them: the fq qdisc that holds packets until
// their departure time, the clsact qdisc (sch_ingress) that carries the
// egress hook, the tc BPF classifier and bpf(2).
var EDTFeatures = []string{"fq", "clsact", "cls_bpf", "bpf"}

// FeatureProbe says whether the kernel has one of EDTFeatures: nil if it
// has, else why not (what says it lacks it, or that nothing says it has
// it).
type FeatureProbe func(feature string) error

// Choice is the backend Auto resolved to, and why.
type Choice struct {
	Backend string
	Reason  string
}

// ChooseBackend resolves o's backend: any but Auto is kept as asked;
// Auto is edt when o names the interface towards the initiators (Dev),
// its read rates (RateDev) are on another one (both want the root
// qdisc), pure ACKs are held (AckDelay: the edt path always holds them in
// the write direction) and has reports every one of EDTFeatures, and
// nfqueue otherwise, with the first reason it is not edt.
func ChooseBackend(o Options, has FeatureProbe) Choice {
	if o.Backend != Auto {
		return Choice{Backend: o.Backend, Reason: "as configured"}
	}
	nfq := func(format string, a ...any) Choice {
		return Choice{Backend: "nfqueue", Reason: "auto: nfqueue, not edt: " + fmt.Sprintf(format, a...)}
	}
	switch {
	case o.Dev == "":
		return nfq("no dev (the interface towards the initiators, which edt's fq and classifier go on)")
	case o.RateDev == o.Dev:
		return nfq("rate_dev is dev %s, and its read-rate HTB takes the root qdisc edt's fq needs", o.Dev)
	case !o.AckDelay:
		return nfq("ack_delay is off, and edt holds pure ACKs in the write direction always")
	}
	for _, f := range EDTFeatures {
		if err := has(f); err != nil {
			return nfq("the kernel lacks %s: %v", f, err)
		}
	}
	return Choice{Backend: "edt", Reason: fmt.Sprintf("auto: edt on %s: the kernel has %s", o.Dev, strings.Join(EDTFeatures, ", "))}
}

// FellBack is the choice when the edt that Auto chose would not start
// (err): nfqueue, which the caller opens instead.
func FellBack(err error) Choice {
	return Choice{Backend: "nfqueue", Reason: fmt.Sprintf("auto: nfqueue, because edt would not start: %v", err)}
}
