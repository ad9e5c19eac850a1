package discover

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Runner runs tgtadm and returns its standard output; the real one is
// ExecRunner, tests use captured output.
type Runner interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// ExecRunner runs a program (normally "tgtadm") with a timeout, so a hung
// tgtd cannot stall discovery.
type ExecRunner struct {
	Path    string
	Timeout time.Duration
}

// Run executes the program with args.
func (e ExecRunner) Run(ctx context.Context, args ...string) ([]byte, error) {
	path := e.Path
	if path == "" {
		path = "tgtadm"
	}
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("running %s %s: %w: %s", path, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// TgtTarget is one target as tgtadm shows it.
type TgtTarget struct {
	TID   int
	Name  string
	State string
	Nexus []TgtNexus
	LUNs  []TgtLUN
	// ACLs are the initiator addresses or names bound to the target
	// ("ALL" for any).
	ACLs []string
}

// TgtNexus is one I_T nexus (session) with its connections' addresses.
type TgtNexus struct {
	ID        int
	Initiator string
	Addrs     []netip.Addr
}

// TgtLUN is one logical unit with its backing store.
type TgtLUN struct {
	LUN         int
	Type        string // "controller", "disk", ...
	BackingType string // "rdwr", "aio", "null", ...
	BackingPath string // "" for None
}

// Tgt discovers through tgtd's management interface.
type Tgt struct {
	runner Runner
	port   int // tgtd control port; 0 = tgtadm's default
}

// NewTgt returns the tgt adapter; controlPort 0 uses tgtadm's default.
func NewTgt(runner Runner, controlPort int) *Tgt {
	return &Tgt{runner: runner, port: controlPort}
}

// Name implements Adapter.
func (t *Tgt) Name() string { return "tgt" }

// Targets runs tgtadm show and parses it.
func (t *Tgt) Targets(ctx context.Context) ([]TgtTarget, error) {
	var args []string
	if t.port != 0 {
		args = append(args, "-C", strconv.Itoa(t.port))
	}
	args = append(args, "--lld", "iscsi", "--mode", "target", "--op", "show")
	out, err := t.runner.Run(ctx, args...)
	if err != nil {
		return nil, err
	}
	return ParseTgtShow(out)
}

// Attachments implements Adapter: every connection address of every
// nexus uses every LUN of its target that has a backing store.
func (t *Tgt) Attachments(ctx context.Context) ([]Attachment, error) {
	targets, err := t.Targets(ctx)
	if err != nil {
		return nil, err
	}
	var out []Attachment
	for _, tg := range targets {
		var backings []string
		for _, l := range tg.LUNs {
			if l.BackingPath != "" {
				backings = append(backings, l.BackingPath)
			}
		}
		sessions := make([]session, len(tg.Nexus))
		for i, n := range tg.Nexus {
			sessions[i] = session{n.Initiator, n.Addrs}
		}
		out = append(out, attachAll(tg.Name, sessions, backings)...)
	}
	return out, nil
}

// ParseTgtShow parses `tgtadm --lld iscsi --mode target --op show`
// (tgt 1.0.x; usr/target.c and usr/iscsi/session.c print it). Lines are
// told apart by their label, not only their indent; a line we do not
// expect is an error naming it, so a format change is noticed, not
// silently misread. Unknown "Key: value" lines inside a LUN or the
// system block are tolerated (tgt adds such fields between versions).
func ParseTgtShow(b []byte) ([]TgtTarget, error) {
	var (
		out     []TgtTarget
		tg      *TgtTarget
		nexus   *TgtNexus
		lun     *TgtLUN
		section string
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	n := 0
	bad := func(line, want string) error {
		return fmt.Errorf("tgtadm show line %d: %q: expected %s", n, strings.TrimSpace(line), want)
	}
	for sc.Scan() {
		n++
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if line == "" {
			continue
		}
		if strings.HasPrefix(raw, "Target ") {
			// "Target 1: iqn.2026-11.org.sanqos:two-luns"
			id, name, ok := strings.Cut(strings.TrimPrefix(raw, "Target "), ": ")
			tid, err := strconv.Atoi(id)
			if !ok || err != nil {
				return nil, bad(raw, `"Target <tid>: <iqn>"`)
			}
			out = append(out, TgtTarget{TID: tid, Name: strings.TrimSpace(name)})
			tg, nexus, lun, section = &out[len(out)-1], nil, nil, ""
			continue
		}
		if tg == nil {
			return nil, bad(raw, `"Target <tid>: <iqn>" first`)
		}
		switch line {
		case "System information:":
			section = "system"
			continue
		case "I_T nexus information:":
			section = "nexus"
			continue
		case "LUN information:":
			section = "lun"
			continue
		case "Account information:":
			section = "account"
			continue
		case "ACL information:":
			section = "acl"
			continue
		}
		key, val, hasColon := strings.Cut(line, ":")
		val = strings.TrimSpace(val)
		switch section {
		case "system":
			if !hasColon {
				return nil, bad(raw, `"Key: value" in System information`)
			}
			if key == "State" {
				tg.State = val
			}
		case "nexus":
			switch key {
			case "I_T nexus":
				id, err := strconv.Atoi(val)
				if err != nil {
					return nil, bad(raw, `"I_T nexus: <number>"`)
				}
				tg.Nexus = append(tg.Nexus, TgtNexus{ID: id})
				nexus = &tg.Nexus[len(tg.Nexus)-1]
			case "Initiator":
				if nexus == nil {
					return nil, bad(raw, `"I_T nexus: <number>" before Initiator`)
				}
				// "iqn... alias: none": the IQN has no spaces.
				nexus.Initiator, _, _ = strings.Cut(val, " ")
			case "Connection":
				if nexus == nil {
					return nil, bad(raw, `"I_T nexus: <number>" before Connection`)
				}
			case "IP Address":
				if nexus == nil {
					return nil, bad(raw, `"I_T nexus: <number>" before IP Address`)
				}
				a, err := netip.ParseAddr(strings.Trim(val, "[]"))
				if err != nil {
					return nil, bad(raw, `"IP Address: <IPv4 or IPv6 address>"`)
				}
				nexus.Addrs = append(nexus.Addrs, a.Unmap())
			default:
				return nil, bad(raw, `"I_T nexus:", "Initiator:", "Connection:" or "IP Address:" in I_T nexus information`)
			}
		case "lun":
			if !hasColon {
				return nil, bad(raw, `"Key: value" in LUN information`)
			}
			switch key {
			case "LUN":
				id, err := strconv.Atoi(val)
				if err != nil {
					return nil, bad(raw, `"LUN: <number>"`)
				}
				tg.LUNs = append(tg.LUNs, TgtLUN{LUN: id})
				lun = &tg.LUNs[len(tg.LUNs)-1]
				continue
			}
			if lun == nil {
				return nil, bad(raw, `"LUN: <number>" first in LUN information`)
			}
			switch key {
			case "Type":
				lun.Type = val
			case "Backing store type":
				lun.BackingType = val
			case "Backing store path":
				if val != "None" {
					lun.BackingPath = val
				}
			}
		case "account":
			// Account names (CHAP users) are not needed; tolerated.
		case "acl":
			tg.ACLs = append(tg.ACLs, line)
		default:
			return nil, bad(raw, "a section header (System, I_T nexus, LUN, Account or ACL information)")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading tgtadm show: %w", err)
	}
	return out, nil
}
