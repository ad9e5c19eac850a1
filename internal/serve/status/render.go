package status

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable writes s as the human-readable report of 'sanqos status'.
func WriteTable(w io.Writer, s Status) error {
	var b strings.Builder
	writeHeader(&b, s)
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	// DELAY is what the members' packets get; CONTROL the controller's
	// output, which it keeps while the set is empty.
	// CEILING is the controller's current u_max, raised while the writers
	// need more delay.
	// FOLLOWS is the statistic held under the threshold and where the
	// reads were measured (ebpf: the block-layer probe; diskstats).
	fmt.Fprintln(tw, "RESOURCE\tFOLLOWS\tSIGNAL ms\tRAW ms\tTARGET ms\tTHRESHOLD ms\tDELAY ms\tCONTROL ms\tCEILING ms\tDIRECTION\tMEMBERS")
	if len(s.Resources) == 0 {
		fmt.Fprintln(tw, "(none discovered)\t\t\t\t\t\t\t\t\t\t")
	}
	for _, r := range s.Resources {
		// A reader's own promise shows whose it is: "8.000 (db1)".
		threshold := fmt.Sprintf("%.3f", r.ThresholdMs)
		if r.ThresholdBy != "" {
			threshold += " (" + r.ThresholdBy + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t%.3f\t%s\t%.2f\t%.2f\t%.1f\t%s\t%s\n",
			r.Name, follows(r), r.SignalMs, r.RawMs, r.TargetMs, threshold, r.DelayMs, r.ControlMs, r.UMaxMs, r.Direction, members(r.Members))
	}
	tw.Flush()
	for _, r := range s.Resources {
		writeResourceNotes(&b, r)
	}
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	// OUTSTANDING is the writes in flight a held writer is judged by;
	// DELAY ms the delay the engine put on its flows and IN FORCE ms the
	// one the data path holds it at.
	// TERMS are the consumer's tenant terms, "-" for the defaults.
	fmt.Fprintln(tw, "CONSUMER\tRESOURCE\tDEVICE\tREAD KiB/s\tWRITE KiB/s\tWRITE EWMA KiB/s\tR_AWAIT ms\tTHROTTLEABLE\tOUTSTANDING\tDELAY ms\tIN FORCE ms\tTERMS")
	for _, c := range s.Consumers {
		terms := c.Terms.String()
		if !c.Terms.Limited() {
			terms = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.2f\t%s\t%.2f\t%.2f\t%.2f\t%s\n",
			c.Label(), c.Resource, c.Device, c.ReadKBs, c.WriteKBs, c.WriteEWMAKBs, c.RAwaitMs, yesNo(c.Throttleable),
			c.OutstandingWrites, c.DelayMs, c.InForceMs, terms)
	}
	tw.Flush()
	for _, c := range s.Consumers {
		if c.InForceMs != c.DelayMs {
			fmt.Fprintf(&b, "note: the data path holds %s at %.2f ms, not the %.2f ms decided (an apply failed, a manual throttle holds it, or the backend leaves it out)\n", c.Addr, c.InForceMs, c.DelayMs)
		}
	}
	b.WriteString("\n")
	writeFooter(&b, s)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeResourceNotes explains, under the resource table, the states of
// r that its columns cannot show: conflicts, saturation, a futile delay,
// the rules holding or remembering a delay, and what the data path or
// the devices do differently from what was decided.
func writeResourceNotes(b *strings.Builder, r Resource) {
	if r.Conflict != "" {
		fmt.Fprintf(b, "CONFLICT: %s: %s\n", r.Name, r.Conflict)
	}
	if r.Saturated {
		fmt.Fprintf(b, "SATURATED: %s's delay sits at its limit (%.0f ms) and its read latency is still over the threshold: raise pid.u_max_limit, or these writers cannot be held back by packet delay alone\n", r.Name, r.UMaxLimitMs)
	}
	if r.Futile {
		fmt.Fprintf(b, "FUTILE: delaying %s's writers bought its reads nothing (last gain %.3f ms per ms of delay): the delay is released and tried again now and then; the readers wait for something else (the target's CPU, the network)\n", r.Name, r.GainMsPerMs)
	}
	if r.RelapseMs > 0 {
		fmt.Fprintf(b, "relapse: %s's delay of %.2f ms let the last overload in: while the guard holds (a minute, doubled each time the overload comes back, up to 4 minutes) the delay falls slowly under %.2f ms\n", r.Name, r.RelapseMs, 1.5*r.RelapseMs)
	}
	if r.RecallMs > 0 && r.ControlMs == 0 {
		fmt.Fprintf(b, "recall: an overload of %s from rest starts at %.2f ms, the delay its last burst needed, not from 0\n", r.Name, r.RecallMs)
	}
	if len(r.Returning) > 0 {
		fmt.Fprintf(b, "armed: %s's returning writers (%s) are held at %.2f ms from their first write\n", r.Name, members(r.Returning), r.ControlMs)
	}
	if r.InForceMs != r.DelayMs {
		fmt.Fprintf(b, "note: %s's data path holds its members at %.2f ms, not the %.2f ms decided (an apply failed, or a manual throttle replaced it)\n", r.Name, r.InForceMs, r.DelayMs)
	}
	if r.PendingMs > 0 {
		fmt.Fprintf(b, "note: %s has a read in flight for %.0f ms; it counts in the signal before it completes\n", r.Name, r.PendingMs)
	}
	if r.MissingDevices > 0 {
		fmt.Fprintf(b, "note: %d device(s) of %s missing from /proc/diskstats; measured without them\n", r.MissingDevices, r.Name)
	}
}

func writeHeader(b *strings.Builder, s Status) {
	fmt.Fprintf(b, "sanqos %s  backend %s  up %s  tick %s  ticks %d  last tick %.2f ms\n",
		s.Version, s.Backend, fmtDuration(s.UptimeS), fmtDuration(s.TickMs/1000), s.Ticks, s.LastTickMs)
	if s.BackendWhy != "" && s.BackendWhy != "as configured" {
		fmt.Fprintf(b, "backend %s: %s\n", s.Backend, s.BackendWhy)
	}
	if s.Discovery.OK {
		fmt.Fprintf(b, "discovery ok (last %s, %d errors)\n", fmtTime(s.Discovery.LastSuccess), s.Discovery.Errors)
	} else {
		fmt.Fprintf(b, "discovery FAILING: %s (last good %s; keeping the last good topology)\n",
			s.Discovery.LastError, fmtTime(s.Discovery.LastSuccess))
	}
	if n := len(s.Discovery.Unresolved); n > 0 {
		fmt.Fprintf(b, "discovery left out %d LUN(s) whose device could not be resolved (see the log): %s\n",
			n, strings.Join(s.Discovery.Unresolved, ", "))
	}
	if s.ApplyError != "" {
		fmt.Fprintf(b, "throttle apply FAILING (retrying every tick): %s\n", s.ApplyError)
	}
	if s.StatsError != "" {
		fmt.Fprintf(b, "diskstats read FAILING: %s\n", s.StatsError)
	}
}

func writeFooter(b *strings.Builder, s Status) {
	t := s.Throttle
	fmt.Fprintf(b, "data path: %d held, %d passed, backlog %d, delay error p50 %.3f ms max %.3f ms\n",
		t.PacketsHeld, t.PacketsPassed, t.Backlog, t.DelayErrorP50Ms, t.DelayErrorMaxMs)
	if t.DelayErrorAvgMs > 0 {
		fmt.Fprintf(b, "data path: fq releases held flows %.3f ms late on average\n", t.DelayErrorAvgMs)
	}
	if t.Dropped > 0 {
		fmt.Fprintf(b, "data path DROPPED %d packets (its kernel queue over its limits; see the log)\n", t.Dropped)
	}
}

// TopOptions shape the live view.
type TopOptions struct {
	// Width is the terminal width in columns; 80 when 0.
	Width int
	// Consumers is how many consumers to list, by write rate; 10 when 0.
	Consumers int
}

// RenderTop returns one frame of 'sanqos top' (without terminal control
// sequences): per resource a bar of the signal against its threshold, the
// delay and the members; then the top consumers by write rate.
func RenderTop(s Status, o TopOptions) string {
	if o.Width <= 0 {
		o.Width = 80
	}
	if o.Consumers <= 0 {
		o.Consumers = 10
	}
	var b strings.Builder
	writeHeader(&b, s)
	b.WriteString("\n")
	nameW := 8
	for _, r := range s.Resources {
		nameW = max(nameW, len(r.Name))
	}
	// name, " ", bar, " signal/threshold ms ", delay
	const tail = 34
	barW := max(10, o.Width-nameW-tail)
	for _, r := range s.Resources {
		state := "  "
		switch {
		case r.Saturated:
			state = "! "
		case r.Futile:
			state = "∅ "
		case r.Throttling():
			state = "▼ "
		}
		fmt.Fprintf(&b, "%-*s %s %6.1f/%-5.1f ms %sdelay %5.2f ms\n",
			nameW, r.Name, bar(r.SignalMs, r.ThresholdMs, barW), r.SignalMs, r.ThresholdMs, state, r.DelayMs)
		fmt.Fprintf(&b, "%-*s members (%d): %s", nameW, "", len(r.Members), members(r.Members))
		if len(r.Returning) > 0 {
			fmt.Fprintf(&b, " · armed (%d): %s", len(r.Returning), members(r.Returning))
		}
		b.WriteString("\n")
	}
	if len(s.Resources) == 0 {
		b.WriteString("(no resources discovered)\n")
	}
	b.WriteString("\n")
	cs := append([]Consumer(nil), s.Consumers...)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].WriteKBs > cs[j].WriteKBs })
	if len(cs) > o.Consumers {
		cs = cs[:o.Consumers]
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOP WRITERS\tRESOURCE\tWRITE KiB/s\tEWMA KiB/s\tREAD KiB/s\tR_AWAIT ms\tSET")
	for _, c := range cs {
		set := ""
		if c.Throttleable {
			set = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.2f\t%s\n",
			c.Label(), c.Resource, c.WriteKBs, c.WriteEWMAKBs, c.ReadKBs, c.RAwaitMs, set)
	}
	tw.Flush()
	writeFooter(&b, s)
	return b.String()
}

// bar draws signal on a scale of twice the threshold (or the signal, if
// larger) with a '|' at the threshold, so "over" is visible at a glance.
func bar(signal, threshold float64, width int) string {
	inner := width - 2
	full := math.Max(2*threshold, signal)
	if full <= 0 || math.IsNaN(full) || math.IsInf(full, 0) {
		full = 1
	}
	n := int(math.Round(signal / full * float64(inner)))
	n = min(max(n, 0), inner)
	mark := int(math.Round(threshold / full * float64(inner)))
	mark = min(max(mark, 0), inner-1)
	cells := make([]rune, inner)
	for i := range cells {
		switch {
		case i < n && threshold > 0 && i >= mark:
			cells[i] = '#'
		case i < n:
			cells[i] = '='
		default:
			cells[i] = ' '
		}
	}
	if threshold > 0 {
		cells[mark] = '|'
	}
	return "[" + string(cells) + "]"
}

func members(m []string) string {
	if len(m) == 0 {
		return "-"
	}
	return strings.Join(m, ",")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func fmtDuration(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second))
	if d >= time.Second {
		d = d.Round(time.Second)
	}
	return d.String()
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// follows is the signal a resource's controller follows and its source,
// e.g. "p95/ebpf"; a percentile asked for but measured from diskstats
// reads "p95→mean/diskstats".
func follows(r Resource) string {
	sig, src := r.Signal, r.Source
	if sig == "" {
		sig = "mean"
	}
	if src == "" {
		return sig
	}
	if sig != "mean" && src != "ebpf" {
		sig += "→mean"
	}
	return sig + "/" + src
}
