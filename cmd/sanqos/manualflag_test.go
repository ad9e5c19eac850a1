package main

import (
	"bytes"
	"strings"
	"testing"
)

// Finding 8 of issue 14: --manual=True and -manual=t started the
// autonomic controller. The mode is read with --help, which each mode
// answers with its own synopsis.
func TestManualFlagValues(t *testing.T) {
	const manualUsage = "Usage: sanqos run --manual"
	const autoUsage = "Usage: sanqos run [--config"
	for _, tt := range []struct {
		arg      string
		code     int
		want     string // in stderr
		wantMode string
	}{
		{"--manual", 0, manualUsage, "manual"},
		{"-manual", 0, manualUsage, "manual"},
		{"--manual=true", 0, manualUsage, "manual"},
		{"--manual=True", 0, manualUsage, "manual"},
		{"--manual=TRUE", 0, manualUsage, "manual"},
		{"-manual=1", 0, manualUsage, "manual"},
		{"--manual=false", 0, autoUsage, "autonomic"},
		{"--manual=False", 0, autoUsage, "autonomic"},
		{"--manual=0", 0, autoUsage, "autonomic"},
		{"-manual=t", 2, "must be true or false", ""},
		{"--manual=T", 2, "must be true or false", ""},
		{"--manual=yes", 2, "must be true or false", ""},
		{"--manual=", 2, "must be true or false", ""},
	} {
		t.Run(tt.arg, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := dispatch([]string{"run", tt.arg, "--help"}, &out, &errb)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, errb.String())
			}
			if !strings.Contains(errb.String(), tt.want) {
				t.Errorf("stderr lacks %q (want %s mode):\n%s", tt.want, tt.wantMode, errb.String())
			}
		})
	}
}

// Issue 15: manual mode is a policy of 'sanqos run', not a second flag
// set. Every flag is defined once: a bad value is refused with the same
// error in both modes, and a flag of either mode is known to the other.
func TestRunModesShareFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--queue-num", "0"}, "--queue-num (queue_num) = 0: must be a queue number from 1 to 65535"},
		{[]string{"--queue-num", "70000"}, "--queue-num (queue_num) = 70000: must be a queue number from 1 to 65535"},
		// The data path's bound (the largest reply that clocks a writer),
		// which its backends enforced at open anyway.
		{[]string{"--small-segment", "-1"}, "--small-segment = -1: must be 0 to 1400 bytes"},
		{[]string{"--small-segment", "65536"}, "--small-segment = 65536: must be 0 to 1400 bytes"},
		{[]string{"--backend", "tape"}, "backend"},
		{[]string{"--socket", "relative.sock"}, "socket"},
		{[]string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var msgs [2]string
			for i, mode := range [][]string{{"run"}, {"run", "--manual"}} {
				var out, errb bytes.Buffer
				code := dispatch(append(append([]string{}, mode...), tt.args...), &out, &errb)
				if code == 0 {
					t.Fatalf("%v %v: exit 0, want an error", mode, tt.args)
				}
				if !strings.Contains(errb.String(), tt.want) {
					t.Errorf("%v %v: stderr lacks %q:\n%s", mode, tt.args, tt.want, errb.String())
				}
				msgs[i] = errb.String()
			}
			if msgs[0] != msgs[1] {
				t.Errorf("the modes refuse %v differently:\nautonomic: %s\nmanual:    %s", tt.args, msgs[0], msgs[1])
			}
		})
	}
	// Flags that once belonged to one mode only are known to both.
	for _, f := range []string{"--dev", "--queue-num", "--small-segment", "--ack-delay", "--config", "--proc", "--cleanup-only", "--threshold"} {
		for _, mode := range [][]string{{"run"}, {"run", "--manual"}} {
			var out, errb bytes.Buffer
			dispatch(append(append([]string{}, mode...), "--help"), &out, &errb)
			if !strings.Contains(errb.String(), "  -"+strings.TrimPrefix(f, "--")) {
				t.Errorf("%v --help does not list %s", mode, f)
			}
		}
	}
	var out, errb bytes.Buffer
	if code := dispatch([]string{"run", "--manual", "--consumer", "fs,10.0.0.3,loop1"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "manual mode has no controller") {
		t.Errorf("--consumer with --manual: exit %d, stderr:\n%s", code, errb.String())
	}
}
