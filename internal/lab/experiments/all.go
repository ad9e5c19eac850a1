package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

// thesisRef is what the thesis reports for an experiment, to stand beside
// ours in the index of 'lab run all'.
var thesisRef = map[string]string{
	"fig4.3":   "EWMA α = 0.15 chosen over a moving median of 6: it follows the trend more closely and is smoother (§4.4.1).",
	"fig5.1":   "Four equal sequential readers share the disk equally, about 9.5 MB/s each.",
	"fig5.2":   "HTB: the capped blade drops at once, the others rise; two runs agree.",
	"fig5.3":   "Read delay: the delayed blade drops at once, the others rise; drops for the others at each switch.",
	"fig5.4":   "Write delay (ACKs): the delayed blade drops at once, the others rise.",
	"fig5.5":   "Reads from 22 to 5 MB/s between 0 and 9.6 ms, near-linear, standard errors barely visible.",
	"fig5.6":   "Writes from 15 to 2.5 MB/s between 0 and 9.6 ms, near-linear, standard errors barely visible.",
	"fig5.7":   "smalljob's wait doubles with one writer and lies between 30 and 120 ms with twelve.",
	"fig5.8":   "smalljob's wait falls in both delay windows, further at 9.6 ms than at 4.6 ms.",
	"fig5.9":   "Manual policy: PID holds 20, 15 and 10 ms; 39 → 33 MB/s of writes buys 25 ms, 5 ms more costs 7 MB/s.",
	"fig5.11":  "Autonomic read-over-write: the same thresholds held with the writers found by themselves (Figs. 5.11–5.13).",
	"overhead": "No overhead idle; worst case (a 0 ms class) 0.42 % on reads, 1.7 % on writes (t-tests).",
}

// AllNames are the thesis's experiments in the order 'lab run all' runs
// them: fig4.3's data is fig5.8's run, so it follows it.
var AllNames = []string{"fig5.1", "fig5.2", "fig5.3", "fig5.4", "fig5.5", "fig5.6", "fig5.7", "fig5.8", "fig4.3", "fig5.9", "fig5.11", "overhead"}

// derivedFrom: experiments whose runs are another's, analysed anew.
var derivedFrom = map[string]string{"fig4.3": "fig5.8"}

// IndexEntry is one experiment of 'lab run all'.
type IndexEntry struct {
	Name    string        `json:"name"`
	Title   string        `json:"title"`
	Thesis  string        `json:"thesis"`
	Ours    string        `json:"ours"`
	Verdict string        `json:"verdict"`
	Plots   []string      `json:"plots,omitempty"` // relative to the index
	Report  string        `json:"report,omitempty"`
	Error   string        `json:"error,omitempty"`
	Took    time.Duration `json:"took"`
	// Kept: the results of an earlier run in the same directory
	// (Options.Resume), not run again; Took is that run's.
	Kept bool `json:"kept,omitempty"`
}

// Index is what 'lab run all' (or a list of experiments) wrote.
type Index struct {
	// Names are the experiments asked for, in order ("all": AllNames).
	Names    []string     `json:"names"`
	Started  time.Time    `json:"started"`
	Finished time.Time    `json:"finished"`
	Short    bool         `json:"short"`
	Entries  []IndexEntry `json:"entries"`
}

// ParseNames reads the experiment argument of 'lab run': "all" (AllNames) or
// experiments' names, comma-separated, each once.
func ParseNames(arg string) ([]string, error) {
	if arg == "all" {
		return AllNames, nil
	}
	var names []string
	for _, n := range strings.Split(arg, ",") {
		n = strings.TrimSpace(n)
		if _, err := Lookup(n); err != nil {
			return nil, err
		}
		if slices.Contains(names, n) {
			return nil, fmt.Errorf("experiment %q named twice", n)
		}
		names = append(names, n)
	}
	return names, nil
}

// RunAll runs the experiments names, each in its own lab and its own
// directory under o.Out, with a progress line before each, and writes
// o.Out/index.html and index.json after each (a stopped run leaves an
// index of what it did). An experiment that fails is recorded and the
// rest still run. With o.Resume, an experiment whose complete results an
// earlier run left in its directory is kept (keepable). An experiment
// whose data is another's run (fig4.3's is fig5.8's) analyses that run
// again when it came earlier in names, and runs its own otherwise (or
// when that run was kept). labFor gives the lab options of a profile.
func RunAll(ctx context.Context, names []string, o Options, labFor func(profile string) (lab.Options, error)) (*Index, error) {
	idx := &Index{Names: names, Started: time.Now().UTC(), Short: o.Short}
	keep, kept, err := keptOf(names, o)
	if err != nil {
		return idx, err
	}
	var left time.Duration
	for i, n := range names {
		left += estimateIn(n, names[:i], kept, o.Short)
	}
	done := map[string]*Summary{}
	var errs []error
	for i, n := range names {
		x, err := Lookup(n)
		if err != nil {
			return idx, err
		}
		xo := o
		xo.Out = filepath.Join(o.Out, n)
		var e IndexEntry
		if s := keep[n]; s != nil {
			e = entryOf(x, s, nil, o.Out)
			e.Took, e.Kept = s.Finished.Sub(s.Started).Round(time.Second), true
			done[n] = s
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "lab run: experiment %d/%d %s kept: its results of %s (took %s) are in %s\n", i+1, len(names), n,
					s.Finished.Local().Format("2006-01-02 15:04"), e.Took, xo.Out)
			}
		} else {
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "lab run: experiment %d/%d %s, %s elapsed, about %s left\n", i+1, len(names), n,
					time.Since(idx.Started).Round(time.Second), left.Round(time.Minute))
			}
			start := time.Now()
			s, err := runOrDerive(ctx, x, xo, names[:i], done, kept, labFor)
			e = entryOf(x, s, err, o.Out)
			e.Took = time.Since(start).Round(time.Second)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n, err))
			} else {
				done[n] = s
			}
		}
		left = max(0, left-estimateIn(n, names[:i], kept, o.Short))
		idx.Entries = append(idx.Entries, e)
		idx.Finished = time.Now().UTC()
		if werr := writeIndex(o.Out, idx); werr != nil {
			return idx, werr
		}
		if ctx.Err() != nil {
			// Stopped (Ctrl-C): the lab is down, the index says how far
			// it got.
			break
		}
	}
	return idx, errors.Join(errs...)
}

// keptOf decides, before anything runs, which of names an earlier run's
// results are kept for (keepable), so that the first estimate counts only
// what will run.
func keptOf(names []string, o Options) (map[string]*Summary, map[string]bool, error) {
	keep, kept := map[string]*Summary{}, map[string]bool{}
	for i, n := range names {
		x, err := Lookup(n)
		if err != nil {
			return nil, nil, err
		}
		xo := o
		xo.Out = filepath.Join(o.Out, n)
		if s := keepable(x, xo, names[:i], kept); s != nil {
			keep[n], kept[n] = s, true
		}
	}
	return keep, kept, nil
}

// keepable is the complete results of an earlier run of x in o.Out, to
// keep instead of running x again (Options.Resume): its summary.json
// (written only when every run completed) for the same experiment, the
// same --short, every planned run, the same controller gains and the same
// disk model. An
// experiment whose data is another's run is kept only with that run kept:
// analysed from other data it would not match. nil: run it.
func keepable(x Experiment, o Options, before []string, kept map[string]bool) *Summary {
	if !o.Resume {
		return nil
	}
	if derivesFrom(x, before, kept) != "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(o.Out, "summary.json"))
	if err != nil {
		return nil
	}
	var s Summary
	if json.Unmarshal(b, &s) != nil || s.Experiment != x.Name || s.Short != o.Short || s.Finished.IsZero() || s.Gains != o.Gains.WithDefaults() {
		return nil
	}
	var ran []string
	for _, r := range s.Runs {
		ran = append(ran, r.Name)
	}
	if want := x.RunNames(o.Short); !slices.Equal(ran, want) || (x.sweep != nil && s.Sweep == nil) {
		return nil
	}
	// A summary from before the disk was recorded is taken as it is.
	if p, err := diskmodel.ProfileByName(x.Profile()); err == nil && s.Lab.Disk != nil && *s.Lab.Disk != p {
		return nil
	}
	s.out = o.Out
	return &s
}

// derivesFrom is the experiment x analyses again instead of running its
// own lab: the one its data comes from, when that came before and was not
// kept (a kept run was read back from its summary.json, without the
// per-second data an analysis needs). "" when x runs.
func derivesFrom(x Experiment, before []string, kept map[string]bool) string {
	if from := derivedFrom[x.Name]; from != "" && slices.Contains(before, from) && !kept[from] {
		return from
	}
	return ""
}

// runOrDerive runs x in a fresh lab, or analyses again the runs of the
// experiment it derives from when that was among before.
func runOrDerive(ctx context.Context, x Experiment, o Options, before []string, done map[string]*Summary, kept map[string]bool, labFor func(string) (lab.Options, error)) (*Summary, error) {
	if from := derivesFrom(x, before, kept); from != "" {
		src := done[from]
		if src == nil {
			return nil, fmt.Errorf("its data is %s's run, which did not complete", from)
		}
		return x.derive(src, o)
	}
	lo, err := labFor(x.Profile())
	if err != nil {
		return nil, err
	}
	return Run(ctx, x.Name, o, lo)
}

// derive writes x's analysis, plots and report of src's runs to o.Out.
func (x Experiment) derive(src *Summary, o Options) (*Summary, error) {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	s := *src
	s.Experiment, s.Title, s.Describe, s.out, s.Checks = x.Name, x.Title, x.Describe, o.Out, nil
	if x.analyze != nil {
		x.analyze(&s)
	}
	var err error
	if s.Plots, err = x.plots(&s, s.Runs); err != nil {
		return &s, err
	}
	s.Checks = checks(&s)
	if err := writeJSON(filepath.Join(o.Out, "summary.json"), &s); err != nil {
		return &s, err
	}
	return &s, WriteHTML(filepath.Join(o.Out, "report.html"), &s, "")
}

// entryOf sums one experiment up for the index.
func entryOf(x Experiment, s *Summary, err error, root string) IndexEntry {
	e := IndexEntry{Name: x.Name, Title: x.Title, Thesis: thesisRef[x.Name]}
	if err != nil {
		e.Error, e.Verdict = err.Error(), "not run: "+err.Error()
	}
	if s == nil {
		return e
	}
	for _, p := range s.Plots {
		e.Plots = append(e.Plots, filepath.Join(x.Name, p))
	}
	if _, serr := os.Stat(filepath.Join(root, x.Name, "report.html")); serr == nil {
		e.Report = filepath.Join(x.Name, "report.html")
	}
	if err == nil {
		e.Ours, e.Verdict = ours(s), verdict(s)
	}
	return e
}

// verdict is "reproduced" when every target of the experiment was met,
// else "differs" with the first target missed; experiments without
// targets say what was found.
func verdict(s *Summary) string {
	if s.Fig43 != nil {
		return s.Fig43.Verdict
	}
	var missed []string
	for _, c := range s.Checks {
		if !c.OK {
			missed = append(missed, fmt.Sprintf("%s: %s: want %s, got %s", c.Run, c.What, c.Want, c.Got))
		}
	}
	var v string
	switch {
	case len(s.Checks) == 0:
		v = "shown (no target to judge it by)"
	case len(missed) == 0:
		v = fmt.Sprintf("reproduced (%d of %d targets met)", len(s.Checks), len(s.Checks))
	default:
		v = fmt.Sprintf("differs: %d of %d targets missed, first %s", len(missed), len(s.Checks), missed[0])
	}
	return v + reportedDifferences(s)
}

// reportedDifferences names the comparisons a sweep reports without
// holding them to a target (overhead's delay class, the thesis's worst
// case) whose difference is distinguishable from 0: "reproduced" speaks
// for the targets only, and a worst case far from the thesis's must be
// read beside it.
func reportedDifferences(s *Summary) string {
	if s.Sweep == nil {
		return ""
	}
	var out []string
	for _, w := range s.Sweep.Welch {
		if b := s.Sweep.stepOf(w.B); b != nil && b.DelayMs > 0 && w.Distinguishable {
			out = append(out, fmt.Sprintf("%s vs %s %+.1f %% (99 %%: %+.1f … %+.1f)", w.B, w.A, w.DiffPct, w.CILowPct, w.CIHighPct))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; differs where only reported (no target): " + strings.Join(out, ", ")
}

// ours is the one line of our numbers that stands beside the thesis's.
func ours(s *Summary) string {
	var parts []string
	switch {
	case s.Sweep != nil && len(s.Sweep.Welch) > 0:
		for _, w := range s.Sweep.Welch {
			parts = append(parts, fmt.Sprintf("%s vs %s %+.2f %% (99 %%: %+.2f … %+.2f)", w.B, w.A, w.DiffPct, w.CILowPct, w.CIHighPct))
		}
	case s.Sweep != nil:
		for _, st := range s.Sweep.Steps {
			parts = append(parts, fmt.Sprintf("%s: %.2f ± %.3f s, %.1f MB/s", st.Label, st.MeanS, st.SES, st.MBs))
		}
	case s.Fig43 != nil:
		for _, sm := range s.Fig43.Smoothers {
			parts = append(parts, fmt.Sprintf("%s: %.1f ms from trend, %.1f ms rough", sm.Name, sm.RMSToTrendMs, sm.RoughnessMs))
		}
	default:
		for _, r := range s.Runs {
			parts = append(parts, runLine(r))
		}
	}
	return strings.Join(parts, "; ")
}

// runLine is one run's numbers for the index.
func runLine(r *RunResult) string {
	switch {
	case len(r.WindowWaits) > 0:
		var ws []string
		for _, w := range r.WindowWaits {
			ws = append(ws, fmt.Sprintf("%g ms: %.1f ms", w.DelayMs, w.MeanMs))
		}
		return r.Name + " smalljob's mean wait with the writers delayed " + strings.Join(ws, ", ")
	case len(r.ScheduleEffects) > 0:
		var es []string
		for _, e := range r.ScheduleEffects {
			es = append(es, fmt.Sprintf("%s %.1f→%.1f MB/s in %.1f s, free others (%s) %.1f→%.1f", e.Host, e.BeforeMBs, e.DuringMBs, e.DropAfterSeconds, e.OthersText(), e.OthersBeforeMBs, e.OthersDuringMBs))
		}
		return r.Name + ": " + strings.Join(es, ", ")
	case r.Guarantees != nil && r.Workload.Readers > 1:
		return fmt.Sprintf("%s: readers %.1f MB/s together, Jain %.3f", r.Name, r.Guarantees.ReaderMBs, r.Jain)
	}
	return fmt.Sprintf("%s: wait mean %.1f p95 %.1f ms, writes %.1f MB/s", r.Name, r.WaitMs.Mean, r.WaitMs.P95, r.WriteMBs)
}

func writeIndex(dir string, idx *Index) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "index.json"), idx); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "index.html"))
	if err != nil {
		return fmt.Errorf("writing the index: %w", err)
	}
	if err := indexTmpl.Execute(f, idx); err != nil {
		f.Close()
		return fmt.Errorf("writing the index: %w", err)
	}
	return f.Close()
}

// Took is how long the experiments took, added up: with experiments kept
// from earlier runs, longer than this run's Finished − Started.
func (idx *Index) Took() time.Duration {
	var d time.Duration
	for _, e := range idx.Entries {
		d += e.Took
	}
	return d
}

// Kept is how many experiments were kept from earlier runs.
func (idx *Index) Kept() int {
	n := 0
	for _, e := range idx.Entries {
		if e.Kept {
			n++
		}
	}
	return n
}

// TookText is an entry's time for the index, saying when it was kept.
func (e IndexEntry) TookText() string {
	if e.Kept {
		return e.Took.String() + " (kept from an earlier run)"
	}
	return e.Took.String()
}

// IndexMarkdown is the index as a Markdown table, to commit in docs/.
func IndexMarkdown(idx *Index) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| experiment | thesis | ours | verdict | took |\n|---|---|---|---|---|\n")
	cell := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ") }
	for _, e := range idx.Entries {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", e.Name, cell(e.Thesis), cell(e.Ours), cell(e.Verdict), e.TookText())
	}
	return b.String()
}

var indexTmpl = template.Must(template.New("index").Funcs(template.FuncMap{"join": strings.Join}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>sanqos lab run {{join .Names ","}}</title>
<style>
body { font-family: sans-serif; max-width: 1250px; margin: 1em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #bbb; padding: 4px 7px; text-align: left; vertical-align: top; }
th { background: #eee; } img { max-width: 560px; border: 1px solid #ddd; }
</style></head><body>
<h1>sanqos lab run {{join .Names ","}}</h1>
<p>Started {{.Started.Format "2006-01-02 15:04 MST"}}, last update {{.Finished.Format "15:04 MST"}}{{if .Short}}, short versions{{end}}.
Each experiment ran in a fresh lab; its own report has the runs, the targets and the commands.
The experiments took {{.Took}} in all{{with .Kept}}, {{.}} of them kept from earlier runs in this directory (--resume){{end}}.</p>
<table><tr><th>experiment</th><th>the thesis</th><th>ours</th><th>verdict</th><th>took</th></tr>
{{range .Entries}}<tr><td>{{if .Report}}<a href="{{.Report}}">{{.Name}}</a>{{else}}{{.Name}}{{end}}<br><small>{{.Title}}</small></td>
<td>{{if .Thesis}}{{.Thesis}}{{else}}–{{end}}</td><td>{{.Ours}}</td><td>{{.Verdict}}</td><td>{{.TookText}}</td></tr>
{{end}}</table>
{{range .Entries}}{{$n := .Name}}{{range .Plots}}<h3>{{$n}}</h3><p><a href="{{.}}"><img src="{{.}}" alt="{{.}}"></a></p>
{{end}}{{end}}
</body></html>
`))

// AllEstimate is roughly how long 'lab run all' takes.
func AllEstimate(short bool) time.Duration { return Estimate(AllNames, short) }

// Estimate is roughly how long running names in turn takes.
func Estimate(names []string, short bool) time.Duration {
	var d time.Duration
	for i, n := range names {
		d += estimateIn(n, names[:i], nil, short)
	}
	return d
}

// estimateIn is how long experiment n takes after the experiments before,
// of which those in kept are kept: nothing when n is kept too or analyses
// again the run of one of them.
func estimateIn(n string, before []string, kept map[string]bool, short bool) time.Duration {
	x, err := Lookup(n)
	if err != nil || kept[n] || derivesFrom(x, before, kept) != "" {
		return 0
	}
	return x.Estimate(short)
}
