package experiments

// The user's variants of an experiment: its runs under another
// threshold (other storage needs its own promise) or with rules of the
// law off (the ablation's lab column), each run renamed to say so.

import (
	"slices"
	"strings"
)

// WithThreshold is x with every controlled run's threshold, and the one
// its uncontrolled runs are judged against, set to ms, each run renamed
// as its label says (pid-15ms becomes pid-0.6ms); ms ≤ 0 leaves x as it
// is.
func (x Experiment) WithThreshold(ms float64) Experiment {
	if ms <= 0 || x.plan == nil {
		return x
	}
	plan := x.plan
	x.refMs = ms
	x.plan = func(short bool) []plannedRun {
		runs := plan(short)
		for i, r := range runs {
			if r.c.ThresholdMs > 0 {
				old := r.c.label()
				r.c.ThresholdMs = ms
				r.name = strings.Replace(r.name, old, r.c.label(), 1)
				runs[i] = r
			}
		}
		return runs
	}
	return x
}

// WithRulesOff is x with these rules of the law off in every run under
// pid, each run renamed by its label (pid-15ms-no-armed), or, where its
// name does not carry the label (tenants' readers-10-20ms), with the
// label's suffix appended (readers-10-20ms-no-retarget).
func (x Experiment) WithRulesOff(off []string) Experiment {
	if len(off) == 0 || x.plan == nil {
		return x
	}
	plan := x.plan
	x.plan = func(short bool) []plannedRun {
		runs := plan(short)
		for i, r := range runs {
			if r.c.Controller == "pid" {
				old := r.c.label()
				r.c.RulesOff = slices.Clone(off)
				if strings.Contains(r.name, old) {
					r.name = strings.Replace(r.name, old, r.c.label(), 1)
				} else {
					r.name += strings.TrimPrefix(r.c.label(), old)
				}
				runs[i] = r
			}
		}
		return runs
	}
	return x
}
