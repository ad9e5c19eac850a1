package experiments

import (
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
)

// Writers that pause between bursts, as a database's checkpoints do:
// within the time the loop holds its delay for them (lull), and past it
// (longlull).

// lullOff is the lull experiment's pause: nine times fig5.11's, within
// the time the loop holds its delay for writers that paused
// (control.ArmHold).
const lullOff = 45 * time.Second

// lullRuns are the lull experiment's runs: fig5.11's load with long
// pauses, uncontrolled and pid at 15 ms; --short still has three bursts.
func lullRuns(short bool) []plannedRun {
	total := runLength(short, 180*time.Second)
	w := interference(total)
	w.Off = lullOff
	pid := Control{Controller: "pid", ThresholdMs: 15}
	return []plannedRun{{"none", w, Control{Controller: "none"}}, {pid.label(), w, pid}}
}

// longLullOff is the longlull experiment's pause: longer than the loop
// holds its delay for writers that paused (control.ArmHold), so that each
// burst after the first meets a loop at rest.
const longLullOff = control.ArmHold + 15*time.Second

// longLullRuns are the longlull experiment's runs: fig5.11's load with
// pauses past ArmHold, uncontrolled and pid at 15 ms; three bursts with
// --short, five without.
func longLullRuns(short bool) []plannedRun {
	total := 660 * time.Second
	if short {
		total = 370 * time.Second
	}
	w := interference(total)
	w.Off = longLullOff
	pid := Control{Controller: "pid", ThresholdMs: 15}
	return []plannedRun{{"none", w, Control{Controller: "none"}}, {pid.label(), w, pid}}
}

// pauseExperiments are lull and longlull.
func pauseExperiments() []Experiment {
	return []Experiment{
		{
			Name:  "lull",
			Title: "Writers that pause for " + lullOff.String() + " between bursts, as a database's checkpoints do (issue 33)",
			Describe: "fig5.11's workload with the writers pausing " + lullOff.String() + " instead of 5 s between bursts: smalljob on b2, " +
				"12 sequential 64 KiB writer threads on b3-b5, " + burstBytes + " per thread per burst; uncontrolled and sanqos pid at " +
				"15 ms. Each burst after the first starts from what the loop held through the pause.",
			refMs: 15,
			plan:  lullRuns,
			plots: plotInterference,
		},
		{
			Name:  "longlull",
			Title: "Writers that pause for " + longLullOff.String() + " between bursts, longer than the loop holds its delay (issue 33)",
			Describe: "fig5.11's workload with the writers pausing " + longLullOff.String() + " between bursts, past the " +
				control.ArmHold.String() + " the loop holds its delay for them: smalljob on b2, 12 sequential 64 KiB writer threads " +
				"on b3-b5, " + burstBytes + " per thread per burst; uncontrolled and sanqos pid at 15 ms. Each burst after the " +
				"first meets a loop at rest, which recalls the delay the last burst needed.",
			refMs: 15,
			plan:  longLullRuns,
			plots: plotInterference,
		},
	}
}
