package main

import (
	"bytes"
	"strings"
	"testing"
)

// Bad arguments to lab run are refused before anything is brought up.
func TestLabRunBadArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown run", []string{"lab", "run", "fig5.11", "--out", "x", "--runs", "pid-9ms"}, `fig5.11 has no run "pid-9ms"; its runs are none, pid-20ms, pid-15ms, pid-10ms, thesis-15ms`},
		{"run not in short", []string{"lab", "run", "fig5.11", "--short", "--out", "x", "--runs", "none,pid-10ms"}, `has no run "pid-10ms"; its runs are none, pid-15ms`},
		{"negative u_max", []string{"lab", "run", "fig5.11", "--out", "x", "--u-max", "-1ms"}, "must not be negative"},
		{"no out", []string{"lab", "run", "fig5.11"}, "--out DIR is required"},
		{"unknown experiment", []string{"lab", "run", "fig9", "--out", "x"}, "fig9"},
		{"resume one experiment", []string{"lab", "run", "fig5.6", "--out", "x", "--resume"}, "--resume keeps experiments of all or a list"},
		{"old threshold's run", []string{"lab", "run", "guarantees-ssd", "--out", "x", "--threshold", "600us", "--runs", "fast-ssd-pid-1.16ms"}, "its runs are fast-ssd-none, fast-ssd-pid-0.6ms"},
		{"negative threshold", []string{"lab", "run", "fig5.11", "--out", "x", "--threshold", "-1ms"}, "must not be negative"},
		{"threshold under the daemon's bound", []string{"lab", "run", "guarantees-ssd", "--out", "x", "--threshold", "62us"}, "--threshold 62µs: must be between 100µs"},
		{"threshold with a list", []string{"lab", "run", "randw,surge24", "--out", "x", "--threshold", "5ms"}, "--threshold sets one experiment's promise"},
		{"unknown rule off", []string{"lab", "run", "fig5.11", "--out", "x", "--rules-off", "armed,armd"}, `--rules-off: rule "armd": want one of`},
		{"run named without its rule off", []string{"lab", "run", "fig5.11", "--out", "x", "--rules-off", "gain", "--runs", "pid-15ms"}, "pid-15ms-no-gain"},
		{"runs with all", []string{"lab", "run", "all", "--out", "x", "--runs", "none"}, "--runs chooses runs of one experiment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := dispatch(tc.args[1:], &out, &errb); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr %q, want it to contain %q", errb.String(), tc.want)
			}
		})
	}
}
