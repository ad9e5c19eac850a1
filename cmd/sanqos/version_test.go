package main

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionInfo(t *testing.T) {
	vcs := func(rev, when, modified string) *debug.BuildInfo {
		bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sanqos/sanqos", Version: "(devel)"}}
		for k, v := range map[string]string{"vcs.revision": rev, "vcs.time": when, "vcs.modified": modified} {
			if v != "" {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: k, Value: v})
			}
		}
		return bi
	}
	for _, tc := range []struct {
		name                      string
		ldVersion, ldCommit, date string
		bi                        *debug.BuildInfo
		want                      buildVersion
	}{
		{
			name:      "make build: the linker's values win",
			ldVersion: "15c53ea-dirty", ldCommit: "15c53ea5b65f", date: "2026-11-28T12:00:00Z",
			bi:   vcs("aaaa", "2026-11-27T00:00:00Z", "false"),
			want: buildVersion{"15c53ea-dirty", "15c53ea5b65f", "2026-11-28T12:00:00Z", "go1.26.8"},
		},
		{
			name: "go build in a checkout: the stamped commit and its time",
			bi:   vcs("15c53ea5b65f", "2026-11-28T06:41:00Z", "false"),
			want: buildVersion{"dev", "15c53ea5b65f", "2026-11-28T06:41:00Z (the commit's time)", "go1.26.8"},
		},
		{
			name: "go build with local changes",
			bi:   vcs("15c53ea5b65f", "2026-11-28T06:41:00Z", "true"),
			want: buildVersion{"dev", "15c53ea5b65f (modified)", "2026-11-28T06:41:00Z (the commit's time)", "go1.26.8"},
		},
		{
			name: "go install module@version: the module's version",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}},
			want: buildVersion{"v1.2.3", "unknown", "unknown", "go1.26.8"},
		},
		{
			name: "go run, no VCS stamp",
			bi:   vcs("", "", ""),
			want: buildVersion{"dev", "unknown", "unknown", "go1.26.8"},
		},
		{
			name: "no build information at all",
			want: buildVersion{"dev", "unknown", "unknown", runtime.Version()},
		},
		{
			name:      "only the version set by the linker",
			ldVersion: "v1.0.0",
			bi:        vcs("15c53ea5b65f", "2026-11-28T06:41:00Z", "false"),
			want:      buildVersion{"v1.0.0", "15c53ea5b65f", "2026-11-28T06:41:00Z (the commit's time)", "go1.26.8"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionInfo(tc.ldVersion, tc.ldCommit, tc.date, tc.bi); got != tc.want {
				t.Errorf("versionInfo = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestVersionCommand: version, -v and --version print the same three
// facts and exit 0.
func TestVersionCommand(t *testing.T) {
	var first string
	for _, args := range [][]string{{"version"}, {"-v"}, {"--version"}} {
		var out, errOut bytes.Buffer
		if code := dispatch(args, &out, &errOut); code != 0 {
			t.Fatalf("sanqos %v: exit %d, stderr %q", args, code, errOut.String())
		}
		for _, want := range []string{"sanqos ", "\ncommit: ", "\nbuilt:  ", "\ngo:     "} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("sanqos %v prints %q, without %q", args, out.String(), want)
			}
		}
		if first == "" {
			first = out.String()
		} else if out.String() != first {
			t.Errorf("sanqos %v prints %q, sanqos version %q", args, out.String(), first)
		}
	}
}
