//go:build race

package nfqbackend

// raceEnabled: under the race detector everything runs several times
// slower, so the live tests still run (for the detector) but do not judge
// timing: delay accuracy and rate ordering are checked by the normal run.
const raceEnabled = true
