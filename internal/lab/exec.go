package lab

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// runner runs one external command to completion. Every kernel-facing step
// of the lab (ip, ethtool, losetup, tgtadm) goes through it, so the order
// of commands Up issues is tested with a recording fake.
type runner interface {
	run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// execRunner runs commands for real.
type execRunner struct{}

func (execRunner) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// inNS runs a command inside a network namespace.
func inNS(ctx context.Context, r runner, ns, name string, args ...string) ([]byte, error) {
	return r.run(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// requiredTools maps each command the lab needs to the Debian package that
// provides it, so a missing one gets an error that says what to install.
var requiredTools = []struct{ cmd, pkg string }{
	{"ip", "iproute2"},
	{"losetup", "mount"},
	{"tgtd", "tgt"},
	{"tgtadm", "tgt"},
	{"ethtool", "ethtool"},
	{"sysctl", "procps"},
}

// checkTools returns one error naming every missing tool and its package.
func checkTools(lookPath func(string) (string, error)) error {
	var missing, pkgs []string
	seen := map[string]bool{}
	for _, t := range requiredTools {
		if _, err := lookPath(t.cmd); err != nil {
			missing = append(missing, t.cmd)
			if !seen[t.pkg] {
				seen[t.pkg] = true
				pkgs = append(pkgs, t.pkg)
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	verb := "is"
	if len(missing) > 1 {
		verb = "are"
	}
	return fmt.Errorf("the lab needs %s, which %s not installed: run 'apt-get install %s' (or 'make deps')",
		strings.Join(missing, ", "), verb, strings.Join(pkgs, " "))
}
