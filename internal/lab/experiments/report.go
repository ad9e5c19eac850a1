package experiments

import (
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Check is one of the targets measured on a run.
type Check struct {
	Run  string `json:"run"`
	What string `json:"what"`
	Want string `json:"want"`
	Got  string `json:"got"`
	OK   bool   `json:"ok"`
}

// checks compares the runs with the targets: a controlled run at
// T ms keeps smalljob's p95 ≤ 1.2 T with ≤ 5 % of seconds above 1.2 T, no
// TCP retransmissions, smalljob within 5 % of its rate, nothing throttled
// 2 s after the writers stop; the uncontrolled p95 is ≥ 2 × the reference
// threshold.
func checks(s *Summary) []Check {
	out := append(append(append(thesisChecks(s), guaranteeChecks(s)...), frontierChecks(s.Frontier)...), signalChecks(s)...)
	out = append(append(append(out, windowChecks(s)...), mechanismChecks(s)...), setChecks(s)...)
	return append(append(out, untunedChecks(s)...), tenantChecks(s)...)
}

// signalChecks are the targets of runs that name their signal (the ssd
// experiment): the daemon's own signal, from the block-layer probe,
// within OverFactor × threshold in ≥ 95 % of the seconds with writers in
// the set, and the reader's initiator-observed p95 below the
// uncontrolled run's.
func signalChecks(s *Summary) []Check {
	var out []Check
	var none *RunResult
	for _, r := range s.Runs {
		if r.ThresholdMs == nil && r.Workload.On != "" {
			none = r
		}
	}
	for _, r := range s.Runs {
		h := r.SignalHold
		if h == nil {
			continue
		}
		out = append(out, Check{r.Name, fmt.Sprintf("daemon's %s signal (%s) within %.4g ms", h.Signal, h.Source, h.LimitMs), "≥ 95 % of seconds",
			fmt.Sprintf("%.1f %% of %d s", h.WithinPct, h.Seconds), h.WithinPct >= 95 && h.Seconds > 0})
		if none != nil {
			out = append(out, Check{r.Name, "reader's p95 wait below uncontrolled", fmt.Sprintf("< %.2f ms", none.WaitMs.P95),
				fmt.Sprintf("%.2f ms", r.WaitMs.P95), r.WaitMs.P95 < none.WaitMs.P95})
		}
	}
	return out
}

// thesisChecks are the targets of the on/off interference runs.
func thesisChecks(s *Summary) []Check {
	var out []Check
	for _, r := range s.Runs {
		if r.Workload.On == "" || r.FixedDelayMs > 0 {
			continue // only the on/off interference experiments have targets; a fixed delay is no control
		}
		if r.ThresholdMs == nil {
			want := 2 * r.OverRefMs
			out = append(out, Check{r.Name, "uncontrolled p95 wait", fmt.Sprintf("≥ %.4g ms", want),
				fmt.Sprintf("%.1f ms", r.WaitMs.P95), r.WaitMs.P95 >= want})
			continue
		}
		th := *r.ThresholdMs
		lim := OverFactor * th
		out = append(out,
			Check{r.Name, "p95 wait", fmt.Sprintf("≤ %.4g ms", lim), fmt.Sprintf("%.1f ms", r.WaitMs.P95), r.WaitMs.P95 <= lim},
			Check{r.Name, fmt.Sprintf("seconds above %.4g ms", lim), "≤ 5 %", fmt.Sprintf("%.1f %%", r.OverThresholdPct), r.OverThresholdPct <= 5},
			Check{r.Name, "TCP retransmissions (initiators)", "0", fmt.Sprint(r.Retransmits), r.Retransmits == 0},
		)
		if r.ReaderGoalKBs > 0 {
			dev := math.Abs(r.ReaderKBs-r.ReaderGoalKBs) / r.ReaderGoalKBs * 100
			out = append(out, Check{r.Name, "smalljob throughput", fmt.Sprintf("%.0f kB/s ± 5 %%", r.ReaderGoalKBs),
				fmt.Sprintf("%.1f kB/s (%.1f %% off)", r.ReaderKBs, dev), dev <= 5})
		}
		if r.Release != nil {
			got := fmt.Sprintf("max %.1f s over %d stops", r.Release.MaxClearS, r.Release.Stops)
			if r.Release.CutShort > 0 {
				got += fmt.Sprintf(" (%d cut short by a writer within %g s)", r.Release.CutShort, ReleaseLimitS)
			}
			if r.Release.MaxClearS < 0 {
				got = fmt.Sprintf("a stop never cleared (%d stops)", r.Release.Stops)
			}
			out = append(out, Check{r.Name, "throttle cleared after writers stop", fmt.Sprintf("≤ %g s", ReleaseLimitS),
				got, r.Release.WithinLimit && r.Release.Stops > 0})
		}
	}
	return out
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"f1": func(x float64) string { return fmt.Sprintf("%.1f", x) },
	"f2": func(x float64) string { return fmt.Sprintf("%.2f", x) },
	"th": func(p *float64) string {
		if p == nil {
			return "–"
		}
		return fmt.Sprintf("%g", *p)
	},
	"rel": func(r *RunResult) string {
		if r.Release == nil {
			return "–"
		}
		if r.Release.MaxClearS < 0 {
			return "never"
		}
		if r.Release.CutShort > 0 {
			return fmt.Sprintf("%.1f s (%d; %d cut short)", r.Release.MaxClearS, r.Release.Stops, r.Release.CutShort)
		}
		return fmt.Sprintf("%.1f s (%d)", r.Release.MaxClearS, r.Release.Stops)
	},
	"delay": func(r *RunResult) string {
		if r.Delay == nil {
			return "–"
		}
		return fmt.Sprintf("%.1f / %.1f (held late ≤ %.1f)", r.Delay.Mean, r.Delay.Max, r.Delay.HoldErrorMaxMs)
	},
	"events": func(evs []RetransmitEvent) string {
		if len(evs) == 0 {
			return "none"
		}
		return describeEvents(evs)
	},
	"base": filepath.Base,
	"secs": func(x float64) string {
		if x < 0 {
			return "never"
		}
		return fmt.Sprintf("%.1f", x)
	},
	"bursty": func(rs []*RunResult) bool {
		for _, r := range rs {
			if r.Bursts != nil {
				return true
			}
		}
		return false
	},
	"minoff": func() int { return minOffSeconds },
	"guaranteed": func(rs []*RunResult) bool {
		for _, r := range rs {
			if r.Guarantees != nil {
				return true
			}
		}
		return false
	},
	"join": func(xs []string) string { return strings.Join(xs, "\n") },
	"sets": func(rs []*RunResult) bool {
		for _, r := range rs {
			if r.ReaderInSet != nil {
				return true
			}
		}
		return false
	},
	"first": func(x float64) string {
		if x < 0 {
			return "never"
		}
		return fmt.Sprintf("%.1f", x)
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>sanqos lab: {{.S.Experiment}}</title>
<style>
body { font-family: sans-serif; max-width: 1250px; margin: 1em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #bbb; padding: 3px 7px; text-align: right; }
th { background: #eee; } td:first-child, th:first-child { text-align: left; }
.ok { color: #070; } .bad { color: #b00; font-weight: bold; }
pre { background: #f6f6f6; padding: 0.5em; overflow-x: auto; font-size: 85%; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
</style></head><body>
<h1>sanqos lab: {{.S.Title}}</h1>
<p>{{.S.Describe}}</p>
<p>Run {{.S.Started.Format "2006-01-02 15:04 MST"}} – {{.S.Finished.Format "15:04 MST"}}{{if .S.Short}}, short version{{end}}.
Lab: storage {{.S.Lab.Storage}}, LUNs of {{.S.Lab.LUNBytes}} bytes, portal {{.S.Lab.Portal}},{{if .S.Lab.NFS}} NFS export {{.S.Lab.NFS}},{{end}}
MTU {{.S.Lab.MTU}}, offloads TSO {{.S.Lab.Offloads.TSO}}, GSO {{.S.Lab.Offloads.GSO}}, GRO {{.S.Lab.Offloads.GRO}}.
pid gains in the daemon's configuration: Kp {{.S.Gains.Kp}}, Ti {{.S.Gains.Ti}}, Td {{.S.Gains.Td}}, u_max {{.S.Gains.UMaxMs}} ms
unless the run says otherwise{{range .S.Runs}}{{if .UMaxMs}}{{if ne .UMaxMs $.S.Gains.UMaxMs}} ({{.Name}}: u_max {{.UMaxMs}} ms){{end}}{{end}}{{end}}.</p>

<h2>Runs</h2>
<p>Wait: smalljob's per-second mean latency as the initiator b2 sees it, over the
seconds the writers were active (fig5.7: the interference window). "Over" is the
share of those seconds above 1.2 × threshold (uncontrolled runs: 1.2 × the
reference threshold). At the target: the same seconds' mean read latency at the target's devices, of the reads
the daemon timed there (every reader's of the resource; its p95 and mean; – without a daemon); the wait less
this is the target's own path (protocol, CPU, network), which no delay can take away.
Write MB/s: the writers' aggregate while active.
Retransmits: TCP retransmitted segments in all initiator namespaces
(target's in parentheses). Jain: over each writer thread's MB/s (fig5.1: over the readers).
Delay: the delay applied to the writers, mean and max over the seconds they were on; held late: the longest any packet
was held beyond its delay (the data path's timing error).
Released: longest time from a stop of the writers to delay 0 and empty sets (number of stops; a stop a writer
ended within 2 s, before the sets were clear, is "cut short" and not judged; – under the manual policy, whose set is
the administrator's list and never empties).</p>
<table>
<tr><th>run</th><th>controller</th><th>threshold ms</th><th>writers</th><th>wait mean</th><th>p50</th><th>p95</th><th>max</th><th>over %</th>
<th>at the target p95 / mean</th><th>write MB/s</th><th>reader kB/s</th><th>retransmits</th><th>Jain</th><th>max write I/O ms</th><th>delay mean / max ms</th><th>released</th></tr>
{{range .S.Runs}}<tr><td>{{.Name}}</td><td>{{.Controller}}{{if .Policy}} ({{.Policy}}){{end}}{{if .FixedDelayMs}}, fixed write delay {{.FixedDelayMs}} ms{{end}}</td><td>{{th .ThresholdMs}}</td><td>{{.Writers}}</td>
<td>{{f1 .WaitMs.Mean}}</td><td>{{f1 .WaitMs.P50}}</td><td>{{f1 .WaitMs.P95}}</td><td>{{f1 .WaitMs.Max}}</td><td>{{f1 .OverThresholdPct}}</td>
<td>{{with .TargetWaitMs}}{{f2 .P95}} / {{f2 .Mean}}{{else}}–{{end}}</td><td>{{f1 .WriteMBs}}</td><td>{{f1 .ReaderKBs}}</td><td>{{.Retransmits}} ({{index .RetransmitsBy "sanqos-bm"}})</td><td>{{f2 .Jain}}</td><td>{{f1 .MaxWriteIOMs}}</td>
<td>{{delay .}}</td><td>{{rel .}}</td></tr>
{{end}}</table>
{{if sets .S.Runs}}<h2>Throttleable set</h2>
<p>How many of the daemon's ticks (100 ms) each host was in a throttleable set, from its record: the reader
writes nothing and must never be in it; a writer is in it while it writes.</p>
<table><tr><th>run</th><th>host</th><th>address</th><th>ticks in the set</th><th>ticks recorded</th><th>first at s</th></tr>
{{range .S.Runs}}{{$r := .}}{{with .ReaderInSet}}<tr><td>{{$r.Name}}</td><td>{{.Host}} (reader)</td><td>{{.Addr}}</td><td>{{.Ticks}}</td><td>{{.Of}}</td><td>{{first .FirstS}}</td></tr>
{{end}}{{range .WritersInSet}}<tr><td>{{$r.Name}}</td><td>{{.Host}}</td><td>{{.Addr}}</td><td>{{.Ticks}}</td><td>{{.Of}}</td><td>{{first .FirstS}}</td></tr>
{{end}}{{end}}</table>{{end}}
{{if bursty .S.Runs}}<h2>Bursts</h2>
<p>Each burst of the writers (from the start of the first second they were active, the onset, to the end of
the last; pauses under {{minoff}} s are inside a burst): the peak of smalljob's 1-second mean wait, the seconds
it spent above 1.2 × threshold (uncontrolled runs: the reference threshold), and the settle time — from the
onset until the wait was back under that limit and stayed there to the burst's end ("never": still over at
the end). Resolution 1 s: a burst whose first second only was over settles in 1 s.
A second in which no read completed counts as over, with a wait of 1000 ms.</p>
<table><tr><th>run</th><th>limit ms</th><th>bursts</th><th>settle median s</th><th>settle max s</th><th>never settled</th><th>peak max ms</th>
<th>each burst: onset s, peak ms, seconds over, settle s</th></tr>
{{range .S.Runs}}{{if .Bursts}}<tr><td>{{.Name}}</td><td>{{f1 .Bursts.LimitMs}}</td><td>{{.Bursts.N}}</td><td>{{secs .Bursts.SettleMedianS}}</td>
<td>{{secs .Bursts.SettleMaxS}}</td><td>{{.Bursts.Unsettled}}</td><td>{{f1 .Bursts.PeakMaxMs}}</td>
<td style="text-align:left; font-size:85%">{{range .Bursts.Bursts}}{{printf "%.0f" .OnsetS}}: {{printf "%.0f" .PeakMs}}, {{printf "%.0f" .AboveS}}, {{secs .SettleS}}{{if .Truncated}} (cut by the run's end){{end}}; {{end}}</td></tr>
{{end}}{{end}}</table>{{end}}
{{with .S.Frontier}}<h2>The price of control</h2>
<p>smalljob's p95 wait and the writers' MB/s under each fixed write delay (0: uncontrolled) and with the controller.
The best static throttle of a threshold is the smallest fixed delay whose p95 is at most the threshold;
the controller's MB/s is given as a share of its, the controller held to a p95 of at most {{.MeetFactor}} × the threshold.
Where no fixed delay of the sweep met the threshold, the sweep's largest delay bounds the best static throttle's MB/s
from above, and the share is a lower bound (≥). The next columns hold the fixed delays to {{.MeetFactor}} × the threshold
as well, then compare at the controller's own p95 (the sweep's MB/s interpolated between the fixed delays around it),
and name the fixed delays the controller beat on both counts (a p95 no higher, more MB/s).</p>
<table><tr><th>run</th><th>fixed delay ms</th><th>threshold ms</th><th>p95 ms</th><th>write MB/s</th></tr>
{{range .Static}}<tr><td>{{.Run}}</td><td>{{.DelayMs}}</td><td>–</td><td>{{f1 .P95Ms}}</td><td>{{f1 .WriteMBs}}</td></tr>
{{end}}{{range .Controller}}<tr><td>{{.Run}}</td><td>–</td><td>{{.ThresholdMs}}</td><td>{{f1 .P95Ms}}</td><td>{{f1 .WriteMBs}}</td></tr>
{{end}}</table>
<table><tr><th>threshold ms</th><th>best static delay ms</th><th>its p95 ms</th><th>its MB/s</th><th>controller run</th><th>controller p95 ms (limit)</th><th>controller MB/s</th><th>share %</th><th>fixed delays held to the limit: delay ms, MB/s, share %</th><th>sweep's MB/s at the controller's p95</th><th>share there %</th><th>better on both counts than</th></tr>
{{range .Best}}<tr><td>{{.ThresholdMs}}</td>{{if .Found}}<td>{{.DelayMs}}</td><td>{{f1 .P95Ms}}</td><td>{{f1 .WriteMBs}}</td>{{else if .BeyondSweep}}<td>over {{.DelayMs}} (none of the sweep met it)</td><td>over {{f1 .P95Ms}}</td><td>under {{f1 .WriteMBs}}</td>{{else}}<td colspan="3">none of the sweep met it</td>{{end}}
<td>{{if .Controller}}{{.Controller}}{{else}}–{{end}}</td><td>{{f1 .ControllerP95Ms}} ({{f1 .LimitMs}})</td><td>{{f1 .ControllerMBs}}</td><td>{{if ge .SharePct 0.0}}{{if .BeyondSweep}}≥ {{end}}{{f1 .SharePct}}{{else}}–{{end}}</td>
<td>{{if .LooseFound}}{{.LooseDelayMs}}, {{f1 .LooseWriteMBs}}, {{if ge .LooseSharePct 0.0}}{{f1 .LooseSharePct}}{{else}}–{{end}}{{else}}none{{end}}</td>
<td>{{if ge .EqualP95SharePct 0.0}}{{f1 .EqualP95MBs}}{{else}}outside the sweep{{end}}</td><td>{{if ge .EqualP95SharePct 0.0}}{{f1 .EqualP95SharePct}}{{else}}–{{end}}</td><td>{{range $i, $d := .Dominates}}{{if $i}}, {{end}}{{$d}}{{else}}–{{end}}</td></tr>
{{end}}</table>{{end}}
{{with .S.Sweep}}<h2>Transfers</h2>
<p>{{.Host}} moved {{.Size}} {{.Repeats}} times under each condition, one after the other; the time is the load
generator's, from its first I/O to its last completion (the iSCSI login left out).</p>
<table><tr><th>condition</th><th>daemon</th><th>delay ms</th><th>mean s</th><th>standard error s</th><th>MB/s</th><th>each transfer s</th></tr>
{{range .Steps}}<tr><td>{{.Label}}</td><td>{{.Daemon}}</td><td>{{.DelayMs}}</td><td>{{printf "%.3f" .MeanS}}</td><td>{{printf "%.4f" .SES}}</td><td>{{f1 .MBs}}</td>
<td style="text-align:left; font-size:85%">{{range .Seconds}}{{printf "%.2f" .}} {{end}}</td></tr>
{{end}}</table>
{{if .Welch}}<p>Welch's t-test of each pair (as the thesis's R t.test): the difference of B's mean time from A's, in
percent of A's, with its {{(index .Welch 0).Confidence}} confidence interval; "distinguishable" when the interval excludes 0.</p>
<table><tr><th>A</th><th>B</th><th>mean A s</th><th>mean B s</th><th>difference %</th><th>interval %</th><th>t</th><th>df</th><th>p</th><th>distinguishable</th></tr>
{{range .Welch}}<tr><td>{{.A}}</td><td>{{.B}}</td><td>{{printf "%.3f" .MeanA}}</td><td>{{printf "%.3f" .MeanB}}</td><td>{{f2 .DiffPct}}</td>
<td>{{f2 .CILowPct}} … {{f2 .CIHighPct}}</td><td>{{f2 .T}}</td><td>{{f1 .DF}}</td><td>{{printf "%.3g" .P}}</td><td>{{.Distinguishable}}</td></tr>
{{end}}</table>{{else}}<p>Time rises with every delay step: {{.Monotonic}}; every step apart from the one before by more than twice
their combined standard error: {{.Separated}}.</p>{{end}}{{end}}
{{range .S.Runs}}{{if .ScheduleEffects}}<h2>{{.Name}}: the schedule's throttles</h2>
<p>Each throttle of the schedule, on the span from its set to the schedule's next event against as long a span before it
(the first second of each left out): the throttled initiator's mean MB/s; the same, added up, for the others that were
free over both spans (a host freed just before would pass its recovery off as a gain), with the standard error of their
rise; and how soon after the set the throttled initiator came down to the span's level (within a fifth of the way from
it to before): the end of the first 100 ms bin opening 500 ms at that level on average.</p>
<table><tr><th>host</th><th>set at s</th><th>span s</th><th>before MB/s</th><th>during MB/s</th><th>free others</th><th>their MB/s before</th><th>during</th><th>rise ± SE</th><th>down after s</th></tr>
{{range $i, $e := .ScheduleEffects}}<tr><td>{{$e.Host}}</td><td>{{f1 $e.SetAtS}}</td><td>{{f1 $e.SpanS}}</td><td>{{f1 $e.BeforeMBs}}</td><td>{{f1 $e.DuringMBs}}</td><td>{{$e.OthersText}}</td><td>{{f1 $e.OthersBeforeMBs}}</td><td>{{f1 $e.OthersDuringMBs}}</td><td>{{f2 $e.Rise}} ± {{f2 $e.OthersRiseSE}}</td><td>{{if ge $e.DropAfterSeconds 0.0}}{{f1 $e.DropAfterSeconds}}{{else}}never{{end}}</td></tr>
{{end}}</table>{{end}}{{end}}
{{range .S.Runs}}{{if .WindowWaits}}<h2>{{.Name}}: smalljob's wait in each delay window</h2>
<p>Mean of smalljob's 1-second waits: while the writers ran unthrottled (5 s after each window left out), and in each
window the writers were delayed (its first second left out).</p>
<table><tr><th>writers' delay ms</th><th>from s</th><th>to s</th><th>mean wait ms</th><th>seconds</th></tr>
{{range .WindowWaits}}<tr><td>{{if .DelayMs}}{{.DelayMs}}{{else}}none{{end}}</td><td>{{f1 .FromS}}</td><td>{{f1 .ToS}}</td><td>{{f1 .MeanMs}}</td><td>{{.Seconds}}</td></tr>
{{end}}</table>{{end}}{{end}}
{{with .S.Fig43}}<h2>The smoothing (thesis §4.4.1)</h2>
<p>Run {{.Run}}, {{.Samples}} one-second samples of smalljob's wait. The trend is a centred 9-second mean (it sees the
future, so no controller could follow it; it is the reference). Distance: root mean square from the trend; lag: the
shift that brings the filter closest to the trend; roughness: root mean square of the second-to-second changes.</p>
<table><tr><th>signal</th><th>RMS from trend ms</th><th>lag s</th><th>roughness ms</th></tr>
{{range .Smoothers}}<tr><td>{{.Name}}</td><td>{{f2 .RMSToTrendMs}}</td><td>{{.LagS}}</td><td>{{f2 .RoughnessMs}}</td></tr>
{{end}}</table><p>Verdict: {{.Verdict}}.</p>{{end}}
{{if guaranteed .S.Runs}}<h2>Guarantees</h2>
<p>What the source reports' guarantees are checked on (see Targets): Jain's index over the writer threads' MB/s in
each burst (a thread's rate while it was on, from the load generator's burst lines), the longest single write and
the longest wait of any writer thread from one completion to the next (the rate limit's and on/off pauses left
out), TCP retransmission timeouts and retransmitted segments no receiver reported as duplicates (DSACK) over the
initiators, the coefficient of variation of the writers' aggregate throughput in 100 ms bins over the steady
seconds of the bursts (controlled runs: only seconds throttled throughout), and the reader's p95 wait and
throughput (several readers: p95 of every reader's 1-second mean latency, and their sum).</p>
<table><tr><th>run</th><th>min Jain (bursts)</th><th>longest write ms</th><th>longest gap ms</th><th>retransmits</th><th>RTOs</th><th>not DSACKed</th>
<th>write CV 100 ms (seconds)</th><th>reader p95 ms</th><th>reader MB/s</th></tr>
{{range .S.Runs}}{{if .Guarantees}}<tr><td>{{.Name}}</td><td>{{printf "%.3f" .Guarantees.MinJain}} ({{len .Guarantees.BurstJain}})</td>
<td>{{f1 .Guarantees.MaxWriteIOMs}}</td><td>{{f1 .Guarantees.MaxWriteGapMs}}</td><td>{{.Retransmits}}</td><td>{{.Guarantees.RTOs}}</td><td>{{.Guarantees.Undetected}}</td>
<td>{{if ge .Guarantees.WriteCV 0.0}}{{f2 .Guarantees.WriteCV}} ({{.Guarantees.CVSeconds}}){{else}}–{{end}}</td><td>{{f1 .Guarantees.ReaderP95Ms}}</td><td>{{printf "%.3f" .Guarantees.ReaderMBs}}</td></tr>
{{end}}{{end}}
</table>{{end}}
<h2>Retransmissions in time</h2>
<p>Each initiator's TcpRetransSegs sampled once a second, beside the time the hypervisor
took from this machine's CPUs in that second (steal: every thread stalls at once, and a loss probe
fires 2·SRTT + 2 ms after the last ACK) and the longest hold beyond the delay in the daemon's ticks
of that second. When the packet thread stalls, the daemon's standby thread on another CPU runs the
packet path for it (takeovers).</p>
<table><tr><th>run</th><th>steal ms over the run</th><th>standby takeovers</th><th>retransmissions: segments, initiator, second</th></tr>
{{range .S.Runs}}<tr><td>{{.Name}}</td><td>{{f1 .StealMs}}</td><td>{{.Takeovers}}</td><td style="text-align:left">{{events .RetransmitEvents}}</td></tr>
{{end}}</table>
{{if .S.Checks}}<h2>Targets</h2>
<table><tr><th>run</th><th>what</th><th>want</th><th>got</th><th></th></tr>
{{range .S.Checks}}<tr><td>{{.Run}}</td><td>{{.What}}</td><td>{{.Want}}</td><td>{{.Got}}</td>{{if .OK}}<td class="ok">met</td>{{else}}<td class="bad">missed</td>{{end}}</tr>
{{end}}</table>{{end}}

<h2>Plots</h2>
{{range .S.Plots}}<p><img src="{{.}}" alt="{{.}}"></p>
{{end}}

<h2>What was run</h2>
{{range .S.Runs}}<p>{{.Name}} (logs in <code>{{base .Dir}}/</code>):</p>
<pre>{{join .Commands}}</pre>
{{end}}
{{.Sim}}
</body></html>
`))

// WriteHTML writes the report page; simHTML, when not empty, is the
// simulator's section (sim.Report's index.html) with its links made
// relative to the page.
func WriteHTML(path string, s *Summary, simHTML string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	err = page.Execute(f, struct {
		S   *Summary
		Sim template.HTML
	}{s, template.HTML(simHTML)})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the report %s: %w", path, err)
	}
	return nil
}

var linkAttr = regexp.MustCompile(`(src|href)="([^"]*)"`)

// rebase prefixes the relative links of an HTML fragment with dir/.
func rebase(fragment, dir string) string {
	return linkAttr.ReplaceAllStringFunc(fragment, func(m string) string {
		sub := linkAttr.FindStringSubmatch(m)
		u := sub[2]
		if u == "" || strings.HasPrefix(u, "#") || strings.HasPrefix(u, "/") || strings.Contains(u, ":") {
			return m
		}
		return sub[1] + `="` + dir + "/" + u + `"`
	})
}
