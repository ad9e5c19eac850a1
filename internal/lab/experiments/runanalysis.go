package experiments

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sanqos/sanqos/internal/lab/iolog"
)

// runLogs are a finished run's load logs, read back for analysis.
type runLogs struct {
	reader     []iolog.Record            // the judged reader's (nil with several readers)
	allReaders map[string][]iolog.Record // by host
	writers    []WriterLog               // the writers' (or, with several readers, the readers')
	maxGap     float64                   // longest gap between a writer's completions, ms
}

// analyze fills the run's result from the logs alone, then from the
// daemon's record, then judges the guarantees.
func (r *run) analyze(samples []tcpSample) error {
	logs, err := r.readLogs()
	if err != nil {
		return err
	}
	r.analyzeWaits(logs)
	// Equal jobs, one per initiator (fig5.2–5.4): what each window did
	// to its host and the others. Beside a reader (fig5.8): the reader's
	// wait in each window.
	if r.w.readers() > 1 {
		r.res.ScheduleEffects = scheduleEffects(r.res.timeline, r.res.Schedule)
	} else if len(r.res.Schedule) > 0 {
		r.res.WindowWaits = windowWaits(r.res.timeline, r.res.Schedule, r.w)
	}
	if r.d != nil {
		if err := r.analyzeRecord(); err != nil {
			return err
		}
	}
	r.res.Guarantees = r.guarantees(logs)
	if len(r.c.Tenants) > 0 {
		from, to := r.w.Lead.Seconds(), (r.w.Lead + r.w.WriterTime).Seconds()
		offsets := map[string]float64{}
		if r.w.TurnReader > 0 {
			offsets[r.e.v.hosts[1].name] = r.w.TurnReader.Seconds()
		}
		r.res.Tenants = analyzeTenants(r.res.timeline, r.res.ticks, logs.allReaders, offsets, r.c, from, to)
	}
	// Without a daemon there are no ticks: the events carry steal only.
	r.res.RetransmitEvents = retransmitEvents(samples, r.res.ticks)
	if n := len(r.res.ticks); n > 0 {
		r.res.Takeovers = r.res.ticks[n-1].Takeovers - r.res.ticks[0].Takeovers
	}
	return nil
}

// readLogs reads every load's log: readers' throughput, writers' per-thread
// MB/s, longest write I/O and gap.
func (r *run) readLogs() (runLogs, error) {
	res, w := r.res, r.w
	logs := runLogs{allReaders: map[string][]iolog.Record{}}
	res.ReadersMBs = map[string]float64{}
	for _, p := range r.procs {
		recs, err := p.records()
		if err != nil {
			return logs, err
		}
		if strings.HasPrefix(filepath.Base(p.log), "reader-") {
			if p.host == r.e.v.reader.name {
				logs.reader = recs
			}
			if s, ok := iolog.Summary(recs, ""); ok {
				res.ReadersMBs[p.host] = s.MBs
			}
			logs.allReaders[p.host] = recs
			if w.readers() > 1 {
				// fig5.1: the readers' per-second MB/s is the plot.
				logs.writers = append(logs.writers, WriterLog{Host: p.host, Records: recs})
			}
			continue
		}
		logs.writers = append(logs.writers, WriterLog{Host: p.host, Offset: w.Lead.Seconds(), Records: recs})
		for th := 1; ; th++ {
			s := iolog.Select(recs, iolog.KindSummary, th, iolog.OpWrite)
			if len(s) == 0 {
				break
			}
			res.WriterMBs = append(res.WriterMBs, s[len(s)-1].MBs)
			res.WriterNames = append(res.WriterNames, fmt.Sprintf("%s/%d", p.host, th))
		}
		if s, ok := iolog.Summary(recs, iolog.OpWrite); ok {
			res.MaxWriteIOMs = max(res.MaxWriteIOMs, s.Lat.Max)
			logs.maxGap = max(logs.maxGap, s.MaxGapMs)
		}
	}
	if w.readers() > 1 {
		logs.reader = nil // fig5.1 has no wait to judge
	} else {
		res.ReadersMBs = nil
	}
	return logs, nil
}

// analyzeWaits computes the reader's wait, the writers' and reader's
// throughput over the judged window, the bursts and Jain's index.
func (r *run) analyzeWaits(logs runLogs) {
	res, w := r.res, r.w
	res.timeline = buildTimeline(logs.reader, logs.writers)
	// Continuous writers (fig5.7, and its run with none): the window is
	// the writers' time; on/off writers: the seconds they were active.
	tl := res.timeline
	waits := tl.activeWaits()
	res.judged = tl.activeSeconds()
	res.WriteMBs = iolog.Round3(tl.activeMean(tl.WriteMBs))
	res.ReaderKBs = iolog.Round3(tl.activeMean(tl.ReaderKBs))
	if w.On == "" && w.WriterTime > 0 {
		from, to := w.Lead.Seconds(), (w.Lead + w.WriterTime).Seconds()
		waits = tl.windowWaits(from, to)
		res.judged = tl.secondsIn(from, to)
		res.WriteMBs = iolog.Round3(tl.windowMean(tl.WriteMBs, from, to))
		res.ReaderKBs = iolog.Round3(tl.windowMean(tl.ReaderKBs, from, to))
	}
	res.WaitMs = statsOf(waits)
	res.ActiveSeconds = len(waits)
	if r.refMs > 0 {
		res.OverThresholdPct = iolog.Round3(overPct(waits, OverFactor*res.OverRefMs))
	}
	if w.readers() == 1 && w.Writers > 0 && res.OverRefMs > 0 {
		bs := analyzeBursts(tl, OverFactor*res.OverRefMs)
		res.Bursts = &bs
	}
	if w.readers() > 1 {
		var mbs []float64
		for _, v := range res.ReadersMBs {
			mbs = append(mbs, v)
		}
		res.Jain = iolog.Round3(iolog.JainIndex(mbs))
	}
	if w.readerJob() == "smalljob" {
		res.ReaderGoalKBs = 256 * 1024 / 1000.0
	}
	if len(res.WriterMBs) > 0 {
		res.Jain = iolog.Round3(iolog.JainIndex(res.WriterMBs))
	}
}

// analyzeRecord stops the daemon, so that its record is complete (the
// deferred stop is then a no-op), and reads its ticks: delays, the hold
// of its own signal, and the release after each stop of the writers.
func (r *run) analyzeRecord() error {
	res, c := r.res, r.c
	if err := r.d.stop(); err != nil {
		return fmt.Errorf("stopping the daemon: %w", err)
	}
	recs, err := readRecord(r.record)
	if err != nil {
		return err
	}
	t0 := float64(r.t0.UnixNano()) / 1e9
	res.ticks = ticksOf(recs, t0)
	in := setMembership(recs, r.e.v.reader, t0)
	res.ReaderInSet = &in
	for _, h := range r.e.v.writers {
		res.WritersInSet = append(res.WritersInSet, setMembership(recs, h, t0))
	}
	ds := delayStats(res.ticks)
	res.Delay = &ds
	res.TargetWaitMs = targetWaits(res.ticks, res.timeline, res.judged, c.Signal == "" || c.Signal == "mean")
	if c.Signal != "" && res.ThresholdMs != nil {
		h := signalHold(res.ticks, c.Signal, *res.ThresholdMs)
		res.SignalHold = &h
	}
	if judgesRelease(c) {
		rs := summarizeReleases(releases(res.ticks))
		res.Release = &rs
	}
	return nil
}

// judgesRelease says whether a run under c is held to the release rule
// (set and delay clear within ReleaseLimitS of the writers stopping). An
// observing daemon never delays; its set lingers by design and says
// nothing about release. The manual policy's set is the administrator's
// list, which never empties (thesis §5.7): the rule is the autonomic
// loop's.
func judgesRelease(c Control) bool {
	return c.Controller != "none" && c.Policy != "manual"
}

// guarantees judges the source reports' guarantees on the run.
func (r *run) guarantees(logs runLogs) *Guarantees {
	res, w := r.res, r.w
	g := &Guarantees{MaxWriteIOMs: res.MaxWriteIOMs, MaxWriteGapMs: logs.maxGap, MinJain: 1, WriteCV: -1}
	g.RTOs, g.Undetected = lossOf(res)
	if res.Bursts != nil {
		g.BurstJain = burstJain(res.Bursts.Bursts, logs.writers)
		for _, j := range g.BurstJain {
			g.MinJain = min(g.MinJain, j)
		}
	}
	tl := res.timeline
	if w.Writers > 0 {
		g.WriteCV, g.CVSeconds, g.CVMBs = binCV(tl, steadySeconds(tl, res.ticks, res.ThresholdMs != nil))
	}
	if w.readers() > 1 {
		g.ReaderP95Ms, g.ReaderMBs = readersWait(logs.allReaders, 0, w.Total.Seconds())
	} else {
		g.ReaderP95Ms, g.ReaderMBs = res.WaitMs.P95, iolog.Round3(res.ReaderKBs/1000)
	}
	return g
}
