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
