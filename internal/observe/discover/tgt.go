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
	p := &tgtParser{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		p.n++
		if err := p.line(sc.Text()); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading tgtadm show: %w", err)
	}
	return p.out, nil
}

// tgtParser is ParseTgtShow's state: the targets so far and where in the
// current one it is.
type tgtParser struct {
	out     []TgtTarget
	tg      *TgtTarget
	nexus   *TgtNexus
	lun     *TgtLUN
	section string
	n       int // line number
}

// tgtSections are the section headers of a target, by their line.
var tgtSections = map[string]string{
	"System information:":    "system",
	"I_T nexus information:": "nexus",
	"LUN information:":       "lun",
	"Account information:":   "account",
	"ACL information:":       "acl",
}

func (p *tgtParser) bad(line, want string) error {
	return fmt.Errorf("tgtadm show line %d: %q: expected %s", p.n, strings.TrimSpace(line), want)
}

func (p *tgtParser) line(raw string) error {
	line := strings.TrimSpace(raw)
	if line == "" {
		return nil
	}
	if strings.HasPrefix(raw, "Target ") {
		// "Target 1: iqn.2026-11.org.sanqos:two-luns"
		id, name, ok := strings.Cut(strings.TrimPrefix(raw, "Target "), ": ")
		tid, err := strconv.Atoi(id)
		if !ok || err != nil {
			return p.bad(raw, `"Target <tid>: <iqn>"`)
		}
		p.out = append(p.out, TgtTarget{TID: tid, Name: strings.TrimSpace(name)})
		p.tg, p.nexus, p.lun, p.section = &p.out[len(p.out)-1], nil, nil, ""
		return nil
	}
	if p.tg == nil {
		return p.bad(raw, `"Target <tid>: <iqn>" first`)
	}
	if s, ok := tgtSections[line]; ok {
		p.section = s
		return nil
	}
	key, val, hasColon := strings.Cut(line, ":")
	val = strings.TrimSpace(val)
	switch p.section {
	case "system":
		if !hasColon {
			return p.bad(raw, `"Key: value" in System information`)
		}
		if key == "State" {
			p.tg.State = val
		}
	case "nexus":
		return p.nexusLine(raw, key, val)
	case "lun":
		if !hasColon {
			return p.bad(raw, `"Key: value" in LUN information`)
		}
		return p.lunLine(raw, key, val)
	case "account":
		// Account names (CHAP users) are not needed; tolerated.
	case "acl":
		p.tg.ACLs = append(p.tg.ACLs, line)
	default:
		return p.bad(raw, "a section header (System, I_T nexus, LUN, Account or ACL information)")
	}
	return nil
}

// nexusLine reads a line of I_T nexus information.
func (p *tgtParser) nexusLine(raw, key, val string) error {
	if key == "I_T nexus" {
		id, err := strconv.Atoi(val)
		if err != nil {
			return p.bad(raw, `"I_T nexus: <number>"`)
		}
		p.tg.Nexus = append(p.tg.Nexus, TgtNexus{ID: id})
		p.nexus = &p.tg.Nexus[len(p.tg.Nexus)-1]
		return nil
	}
	switch key {
	case "Initiator", "Connection", "IP Address":
		if p.nexus == nil {
			return p.bad(raw, `"I_T nexus: <number>" before `+key)
		}
	default:
		return p.bad(raw, `"I_T nexus:", "Initiator:", "Connection:" or "IP Address:" in I_T nexus information`)
	}
	switch key {
	case "Initiator":
		// "iqn... alias: none": the IQN has no spaces.
		p.nexus.Initiator, _, _ = strings.Cut(val, " ")
	case "IP Address":
		a, err := netip.ParseAddr(strings.Trim(val, "[]"))
		if err != nil {
			return p.bad(raw, `"IP Address: <IPv4 or IPv6 address>"`)
		}
		p.nexus.Addrs = append(p.nexus.Addrs, a.Unmap())
	}
	return nil
}

// lunLine reads a "Key: value" line of LUN information.
func (p *tgtParser) lunLine(raw, key, val string) error {
	if key == "LUN" {
		id, err := strconv.Atoi(val)
		if err != nil {
			return p.bad(raw, `"LUN: <number>"`)
		}
		p.tg.LUNs = append(p.tg.LUNs, TgtLUN{LUN: id})
		p.lun = &p.tg.LUNs[len(p.tg.LUNs)-1]
		return nil
	}
	if p.lun == nil {
		return p.bad(raw, `"LUN: <number>" first in LUN information`)
	}
	switch key {
	case "Type":
		p.lun.Type = val
	case "Backing store type":
		p.lun.BackingType = val
	case "Backing store path":
		if val != "None" {
			p.lun.BackingPath = val
		}
	}
	return nil
}
