package experiments

import (
	"fmt"
	"io"
	"time"
)

// progress prints what runs and how long is left.
type progress struct {
	w     io.Writer
	x     Experiment
	plan  []plannedRun
	i     int
	start time.Time
}

func newProgress(w io.Writer, x Experiment, plan []plannedRun) *progress {
	return &progress{w: w, x: x, plan: plan}
}

func (p *progress) left(inRun time.Duration) time.Duration {
	d := max(inRun, 0)
	for _, r := range p.plan[p.i+1:] {
		d += r.overhead() + r.w.Total
	}
	return d
}

func (p *progress) startRun(i int) {
	p.i, p.start = i, time.Now()
	if p.w == nil {
		return
	}
	r := p.plan[i]
	fmt.Fprintf(p.w, "%s: run %d/%d %s (%s): about %s left in all\n", p.x.Name, i+1, len(p.plan), r.name,
		r.c.describe(), p.left(r.overhead()+r.w.Total).Round(time.Second))
}

func (p *progress) update(runLeft time.Duration) {
	if p.w == nil {
		return
	}
	fmt.Fprintf(p.w, "%s: run %d/%d %s: %s left in this run, %s in all\n", p.x.Name, p.i+1, len(p.plan), p.plan[p.i].name,
		max(runLeft, 0).Round(time.Second), p.left(runLeft).Round(time.Second))
}

func (p *progress) doneRun(r *RunResult) {
	if p.w == nil {
		return
	}
	if g := r.Guarantees; g != nil && r.Workload.Readers > 1 {
		fmt.Fprintf(p.w, "%s: run %s done: readers' p95 wait %.1f ms, %.1f MB/s together, retransmits %d\n",
			p.x.Name, r.Name, g.ReaderP95Ms, g.ReaderMBs, r.Retransmits)
	} else {
		fmt.Fprintf(p.w, "%s: run %s done: wait p95 %.1f ms, write %.1f MB/s, retransmits %d\n",
			p.x.Name, r.Name, r.WaitMs.P95, r.WriteMBs, r.Retransmits)
	}
	if len(r.RetransmitEvents) > 0 {
		fmt.Fprintf(p.w, "%s: run %s retransmitted: %s\n", p.x.Name, r.Name, describeEvents(r.RetransmitEvents))
	}
}

// line writes one progress line.
func (p *progress) line(format string, args ...any) {
	if p.w != nil {
		fmt.Fprintf(p.w, format+"\n", args...)
	}
}
