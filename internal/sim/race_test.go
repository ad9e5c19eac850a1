//go:build race

package sim

// raceEnabled: under the race detector the simulator runs about twenty
// times slower; tests that judge control over many long runs leave it to
// the normal test run.
const raceEnabled = true
