package acttest

import (
	"context"
	"fmt"
	"strings"
)

// Recorder is a Runner that records commands and answers like a machine
// with no sanqos objects: checks for our jump and chain fail, and the
// device has its default qdisc. It remembers what the commands it ran
// created, so that a later check or show sees them.
type Recorder struct {
	Log           strings.Builder // every command run, with its stdin
	Jump, Chained bool
	Input         bool   // a jump from INPUT
	Root          string // handle of the root qdisc we added
}

// Run records the command and answers as iptables or tc would.
func (r *Recorder) Run(_ context.Context, stdin, name string, args ...string) (string, error) {
	cmd := name + " " + strings.Join(args, " ")
	fmt.Fprintf(&r.Log, "$ %s\n%s", cmd, stdin)
	if cmd == "tc -batch -" {
		for _, l := range strings.Split(strings.TrimSpace(stdin), "\n") {
			if f := strings.Fields(l); len(f) > 6 && f[0] == "qdisc" && f[1] == "add" && f[4] == "root" {
				r.Root = f[6]
			}
		}
		return "", nil
	}
	if strings.Contains(stdin, ":SANQOS") {
		r.Chained = true
	}
	if strings.Contains(stdin, "-A POSTROUTING -j SANQOS") {
		r.Jump = true
	}
	if strings.Contains(stdin, "-A INPUT -j SANQOS") {
		r.Input = true
	}
	switch {
	case strings.Contains(cmd, " -C POSTROUTING") && !r.Jump, strings.Contains(cmd, " -S SANQOS") && !r.Chained,
		strings.Contains(cmd, " -C INPUT") && !r.Input:
		return "", fmt.Errorf("exit status 1")
	case strings.Contains(cmd, " -D INPUT"):
		r.Input = false
	case strings.Contains(cmd, " -D POSTROUTING"):
		r.Jump = false
	case strings.Contains(cmd, " -X SANQOS"):
		r.Chained = false
	case strings.HasPrefix(cmd, "tc qdisc add") && args[4] == "root":
		r.Root = args[6]
	case strings.HasPrefix(cmd, "tc qdisc del") && args[4] == "root":
		r.Root = ""
	case strings.HasPrefix(cmd, "tc qdisc show") && r.Root != "":
		return "qdisc htb " + r.Root + " root refcnt 2 r2q 10 default 0x1\n", nil
	case strings.HasPrefix(cmd, "tc qdisc show"):
		return "qdisc noqueue 0: root refcnt 2\n", nil
	}
	return "", nil
}
