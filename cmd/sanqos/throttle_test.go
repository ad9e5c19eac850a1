package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/ctl"
	"github.com/sanqos/sanqos/internal/throttle"
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
