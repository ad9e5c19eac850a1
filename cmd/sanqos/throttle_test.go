package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/serve/ctl"
)

// TestPrintThrottlesShowsAckDelay: 'sanqos throttle --list' says whether
// write delays hold pure ACKs, and says nothing for backends that do not
// tell them apart.
func TestPrintThrottlesShowsAckDelay(t *testing.T) {
	for _, c := range []struct {
		stats throttle.Stats
		want  string
	}{
		{throttle.Stats{PureAcks: "held"}, "hold pure ACKs too (--ack-delay)"},
		{throttle.Stats{PureAcks: "passed", AcksPassed: 42}, "pure ACKs pass at once (42 so far"},
		{throttle.Stats{}, ""},
	} {
		var b bytes.Buffer
		st := c.stats
		printThrottles(&b, ctl.Response{OK: true, Mode: "manual", Backend: "nfqueue", Stats: &st})
		out := b.String()
		if c.want == "" {
			if strings.Contains(out, "ACK") {
				t.Errorf("stats %+v: output mentions ACKs:\n%s", c.stats, out)
			}
		} else if !strings.Contains(out, c.want) {
			t.Errorf("stats %+v: output lacks %q:\n%s", c.stats, c.want, out)
		}
	}
}

// TestThrottleRateFlags: bad rates and a rate with a delay get one clear
// error each, before any daemon is asked.
func TestThrottleRateFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ip", "10.0.0.3", "--rate", "0MB/s"}, "not above 0"},
		{[]string{"--ip", "10.0.0.3", "--rate", "-3MB/s"}, "not above 0"},
		{[]string{"--ip", "10.0.0.3", "--rate", "quick"}, "want a number and a unit"},
		{[]string{"--ip", "10.0.0.3", "--rate", "20Gbit/s"}, "above 1250MB/s"},
		{[]string{"--ip", "10.0.0.3", "--rate", "10MB/s", "--direction", "write"}, "caps reads only"},
		{[]string{"--ip", "10.0.0.3", "--rate", "10MB/s", "--delay", "5ms"}, "exactly one of"},
	} {
		var out, errb bytes.Buffer
		code := dispatch(append([]string{"throttle", "--socket", "/nonexistent/s.sock"}, c.args...), &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), c.want) || strings.Contains(errb.String(), "no sanqos daemon") {
			t.Errorf("%v: exit %d, stderr %q; want a refusal containing %q before any daemon is called", c.args, code, errb.String(), c.want)
		}
	}
}

func TestPrintThrottlesShowsRates(t *testing.T) {
	var b bytes.Buffer
	printThrottles(&b, ctl.Response{OK: true, Mode: "manual", Backend: "nfqueue+htb", Throttles: []ctl.Throttle{
		{IP: "10.0.0.3", Rate: "10MB/s", Direction: "read", Ports: []uint16{3260}, Source: "manual"},
		{IP: "10.0.0.4", Delay: "5ms", Direction: "write", Ports: []uint16{3260}, Source: "vg-data"},
	}})
	out := b.String()
	for _, want := range []string{"RATE", "10.0.0.3  -      10MB/s", "10.0.0.4  5ms    -"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestReloadRefusesRateChanges: rate_dev and manual.read_rates are bound
// at start; a reload that changes them is refused with what to do.
func TestReloadRefusesRateChanges(t *testing.T) {
	dir := t.TempDir()
	opts := func(text string) runOptions {
		p := filepath.Join(dir, "c.toml")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		o, err := parseRunOptions([]string{"--config", p, "--consumer", "fs,10.0.0.3,loop1"}, false, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	a := opts("")
	b := opts("backend = \"nfqueue\"\nrate_dev = \"eth1\"\n[manual]\nread_rates = { \"10.0.0.4\" = \"10MB/s\" }\n")
	got := strings.Join(restartOnly(a, b), ", ")
	if !strings.Contains(got, "rate_dev") || !strings.Contains(got, "manual.read_rates") {
		t.Errorf("restart-only changes %q, want rate_dev and manual.read_rates", got)
	}
	if got := restartOnly(b, b); len(got) != 0 {
		t.Errorf("no change reported as %v", got)
	}
}

// TestThrottleTerms: 'sanqos throttle --share 4 CONSUMER' sends the terms
// as typed to the daemon's socket, --clear-terms clears them, --list
// shows them; bad terms are refused before any daemon is asked.
func TestThrottleTerms(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the control socket serves uid 0 only")
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	srv, err := ctl.Listen(sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex // the server's goroutine appends, the test reads
	var got []ctl.Request
	var ov ctl.Overrides
	done := make(chan error, 1)
	go func() {
		done <- srv.Serve(ctx, ctl.HandlerFunc(func(_ context.Context, r ctl.Request) ctl.Response {
			mu.Lock()
			got = append(got, r)
			mu.Unlock()
			if r.Op == ctl.OpTerms {
				o, err := ctl.ParseTerms(r.TermsRequest)
				if err != nil {
					return ctl.Response{Error: err.Error()}
				}
				ov.SetTerms(o)
			}
			return ctl.Response{OK: true, Mode: "autonomic", Backend: "dry-run", Terms: ov.TermsList()}
		}))
	}()
	t.Cleanup(func() { cancel(); <-done })
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := dispatch(append([]string{"throttle", "--socket", sock}, args...), &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := run("--share", "4", "--cap", "50MB/s", "db1"); code != 0 || !strings.Contains(out, "db1: runtime terms set") {
		t.Fatalf("set: exit %d: %s", code, out)
	}
	if code, out := run("--clear-terms", "--ip", "10.0.0.5"); code != 0 || !strings.Contains(out, "10.0.0.5: runtime terms cleared") {
		t.Fatalf("clear: exit %d: %s", code, out)
	}
	if code, out := run("--list"); code != 0 || !strings.Contains(out, "db1       share 4, cap 50MB/s") {
		t.Errorf("list: exit %d:\n%s", code, out)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []ctl.Request{
		{Op: ctl.OpTerms, TermsRequest: ctl.TermsRequest{Match: "db1", Share: "4", Cap: "50MB/s"}},
		{Op: ctl.OpClearTerms, TermsRequest: ctl.TermsRequest{Match: "10.0.0.5"}},
	}
	if len(got) < 2 || got[0].Op != want[0].Op || got[0].TermsRequest != want[0].TermsRequest || got[1].Op != want[1].Op || got[1].TermsRequest != want[1].TermsRequest {
		t.Errorf("requests %+v, want %+v", got, want)
	}
	n := len(got)
	mu.Unlock()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--share", "4"}, "name the consumer"},
		{[]string{"--share", "-4", "db1"}, "not negative"},
		{[]string{"--cap", "50", "db1"}, "with its unit"},
		{[]string{"--share", "2", "--delay", "5ms", "db1"}, "exactly one of"},
		{[]string{"--share", "2", "--ip", "10.0.0.5", "db1"}, "name the consumer once"},
		{[]string{"--delay", "5ms", "10.0.0.5"}, "give the initiator as --ip"},
		{[]string{"--share", "2", "db1", "db2"}, `unexpected argument "db2"`},
	} {
		if code, out := run(c.args...); code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, %q; want a refusal containing %q", c.args, code, out, c.want)
		}
	}
	mu.Lock()
	if len(got) != n {
		t.Errorf("refused requests reached the daemon: %+v", got[n:])
	}
}
