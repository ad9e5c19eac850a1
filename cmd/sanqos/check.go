package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/decide/tenant"
	"github.com/sanqos/sanqos/internal/observe/blkprobe"
	"github.com/sanqos/sanqos/internal/observe/discover"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// cmdCheck is 'sanqos check': it validates a configuration as 'sanqos run'
// would start with it, then says what this host offers the configured
// backend and probe, what discovery finds now and which capabilities are
// missing, touching nothing. It exits 0 when run would start, 1 with the
// reasons when not. The unit's ExecReload runs it before sending SIGHUP,
// so that 'systemctl reload sanqos' with a bad file fails with the reason
// instead of succeeding while the daemon refuses the file in its journal.
func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runCheck(ctx, args, stdout, stderr, checker{sys: hostSystem{}, loadProbe: loadProbe, euid: os.Geteuid()})
}

// checker is what a check reads the host through (fixtures in tests).
type checker struct {
	sys checkSystem
	// loadProbe loads the eBPF block probe on devs and removes it again.
	loadProbe func(devs []string) error
	euid      int
}

// loadProbe is checker.loadProbe on the host: the probe the daemon would
// open, closed at once. It leaves nothing behind: the programs and their
// tracepoint links go with the file descriptors.
func loadProbe(devs []string) error {
	p, err := blkprobe.Open(devs, blkprobe.Options{})
	if err != nil {
		return err
	}
	return p.Close()
}

// checkItem is one line of the report.
type checkItem struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// checkReport is 'sanqos check --json': a stable document. Fields are
// only ever added.
type checkReport struct {
	WouldRun     bool           `json:"would_run"`
	Reasons      []string       `json:"reasons,omitempty"`
	Config       checkConfig    `json:"config"`
	Kernel       []checkItem    `json:"kernel"`
	Backend      checkBackend   `json:"backend"`
	Capabilities []checkItem    `json:"capabilities"`
	Discovery    checkDiscovery `json:"discovery"`
}

type checkConfig struct {
	File     string   `json:"file"` // "" for the built-in defaults
	Status   string   `json:"status"`
	Error    string   `json:"error,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Tenants are the [[tenants.consumer]] entries read, their classes
	// applied; Conflict the rule between reservations and promises.
	Tenants  []checkTenant `json:"tenants,omitempty"`
	Conflict string        `json:"conflict,omitempty"`
}

type checkTenant struct {
	Name  string       `json:"name,omitempty"`
	Match []string     `json:"match"`
	Terms tenant.Terms `json:"terms"`
}

type checkBackend struct {
	Name string `json:"name"`
	// Asked is "auto" when Name is auto's choice.
	Asked  string   `json:"asked,omitempty"`
	Status string   `json:"status"`
	Why    string   `json:"why"`
	Needs  []string `json:"needs"` // kernel lines and capabilities it needs
}

type checkDiscovery struct {
	Adapter   string          `json:"adapter"`
	Status    string          `json:"status"`
	Error     string          `json:"error,omitempty"`
	Resources []checkResource `json:"resources"`
}

type checkResource struct {
	Name      string          `json:"name"`
	Leaves    []string        `json:"leaves,omitempty"`
	Consumers []checkConsumer `json:"consumers"`
	// Writeback is writebackHint's note, if any.
	Writeback string `json:"writeback,omitempty"`
}

type checkConsumer struct {
	Addr   string   `json:"addr"`
	Device string   `json:"device"`
	IQNs   []string `json:"iqns,omitempty"`
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer, ck checker) error {
	runArgs, asJSON, configOnly, help := checkArgs(args)
	if help {
		fmt.Fprint(stdout, checkUsage)
		return errHelp
	}
	manual, err := manualMode(runArgs)
	if err != nil {
		return err
	}
	r := checkReport{Config: checkConfig{File: flagValueIn(runArgs, "config"), Status: stOK}, Discovery: checkDiscovery{Status: stOff}}
	// run's own parser and validation: the flags are run's, so that the
	// unit's ExecStart arguments can be checked as given.
	o, cfgErr := validateAsRun(runArgs, manual)
	if configOnly {
		// The unit's ExecReload: only what a reload can get wrong.
		if cfgErr != nil {
			return cfgErr
		}
		for _, w := range o.config.Warnings() {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
		fmt.Fprintln(stdout, "configuration OK")
		return nil
	}
	if cfgErr != nil {
		r.Config.Status, r.Config.Error = stError, cfgErr.Error()
		r.Reasons = append(r.Reasons, "the configuration is refused")
	} else {
		r.Config.Warnings = o.config.Warnings()
		if len(o.config.Tenants.Consumer) > 0 {
			r.Config.Conflict = string(o.engine.Tenants.Precedence())
		}
		entries, _ := tenantEntries(o.config) // validated above
		for _, e := range entries {
			r.Config.Tenants = append(r.Config.Tenants, checkTenant{Name: e.Terms.Name, Match: e.Match, Terms: e.Terms})
		}
	}

	k := readKernelInfo(ck.sys)
	r.Kernel = append(r.Kernel, probeIptables(ctx, ck.sys))
	for _, f := range kernelFeatures {
		r.Kernel = append(r.Kernel, probeFeature(ck.sys, k, f))
	}
	r.Kernel = append(r.Kernel, probeTools(ck.sys)...)
	caps, capsErr := effectiveCaps(ck.sys)

	if cfgErr == nil {
		r.Discovery = ck.discovery(ctx, o, manual)
		r.Kernel = append(r.Kernel, ck.probe(o, manual, r.Discovery, caps, capsErr))
		var why []string
		r.Backend, r.Capabilities, why = ck.backend(o, runArgs, manual, r.Kernel, caps, capsErr)
		if r.Backend.Status != stOK {
			r.Reasons = append(r.Reasons, fmt.Sprintf("the %s backend cannot run here: %s", r.Backend.Name, strings.Join(why, "; ")))
		}
	}
	r.WouldRun = len(r.Reasons) == 0

	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
	} else {
		writeCheck(stdout, r)
		for _, w := range r.Config.Warnings {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
	}
	switch {
	case cfgErr != nil:
		return cfgErr
	case !r.WouldRun:
		return fmt.Errorf("would not run: %s", strings.Join(r.Reasons, "; "))
	}
	return nil
}

// validateAsRun parses and validates args as run does, and builds what
// run builds from them before it touches the kernel (daemonOptions, and
// the reloader on SIGHUP): the engine and the discovery adapter.
func validateAsRun(args []string, manual bool) (runOptions, error) {
	var msgs strings.Builder
	o, err := parseRunOptions(args, manual, &msgs)
	if errors.Is(err, errUsage) {
		return o, errors.New(strings.TrimSpace(msgs.String()))
	}
	if err != nil || manual {
		return o, err
	}
	if _, err := engine.New(o.engine, o.topo); err != nil {
		return o, fmt.Errorf("configuration: %w", err)
	}
	if !o.fixed {
		if _, err := discover.FromConfig(o.config, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
			return o, fmt.Errorf("discovery: %w", err)
		}
	}
	return o, nil
}

// checkArgs takes check's own flags out of args; the rest are run's.
func checkArgs(args []string) (runArgs []string, asJSON, configOnly, help bool) {
	for _, a := range args {
		switch a {
		case "-h", "--help", "-help":
			help = true
		case "--json", "-json", "--json=true", "-json=true":
			asJSON = true
		case "--json=false", "-json=false":
			asJSON = false
		case "--config-only", "-config-only":
			configOnly = true
		default:
			runArgs = append(runArgs, a)
		}
	}
	return runArgs, asJSON, configOnly, help
}

// flagValueIn returns the value of --name in args ("" if absent).
func flagValueIn(args []string, name string) string {
	v := ""
	for i, a := range args {
		if a == "--" {
			break
		}
		n := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if n == name && i+1 < len(args) {
			v = args[i+1]
		} else if val, ok := strings.CutPrefix(n, name+"="); ok {
			v = val
		}
	}
	return v
}

// discovery runs the configured adapter once, read-only, as the daemon's
// first discovery would.
func (ck checker) discovery(ctx context.Context, o runOptions, manual bool) checkDiscovery {
	d := checkDiscovery{Adapter: o.config.Discovery.Adapter, Status: stOK, Resources: []checkResource{}}
	var t topology.Topology
	switch {
	case manual:
		d.Adapter, d.Status = "", stOff
		return d
	case o.fixed:
		d.Adapter, t = "--consumer", o.topo
	default:
		disc, err := discover.FromConfig(o.config, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil {
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			t, err = disc.Discover(dctx)
			cancel()
		}
		if err != nil {
			// Not a reason to stay down: the daemon retries every
			// discovery.interval and throttles nobody meanwhile.
			d.Status, d.Error = stError, err.Error()
			return d
		}
	}
	for _, res := range t.Resources {
		cr := checkResource{Name: res.Name, Leaves: res.Leaves, Consumers: []checkConsumer{},
			Writeback: writebackHint(ck.sys, d.Adapter, res)}
		for _, c := range res.Consumers {
			cr.Consumers = append(cr.Consumers, checkConsumer{Addr: c.Addr.String(), Device: c.Device, IQNs: c.IQNs})
		}
		d.Resources = append(d.Resources, cr)
	}
	return d
}

// probe says whether the eBPF block probe would load, by loading it on
// the devices discovery found (or the first block device) and removing
// it again.
func (ck checker) probe(o runOptions, manual bool, d checkDiscovery, caps uint64, capsErr error) checkItem {
	it := checkItem{Name: "block probe"}
	switch {
	case manual:
		it.Status, it.Detail = stOff, "manual mode measures nothing"
		return it
	case o.config.Probe == "off":
		it.Status, it.Detail = stOff, "probe = off: reads are timed by /proc/diskstats"
		return it
	case !ck.sys.Exists("/sys/kernel/btf/vmlinux"):
		it.Status, it.Detail = stMissing, "no kernel BTF: reads are timed by /proc/diskstats (mean only, no p95/p99)"
		return it
	case capsErr == nil && (caps&(1<<39) == 0 || caps&(1<<38) == 0):
		it.Status, it.Detail = stMissing, "needs CAP_BPF and CAP_PERFMON: reads are timed by /proc/diskstats (mean only, no p95/p99)"
		return it
	}
	var devs []string
	for _, r := range d.Resources {
		for _, c := range r.Consumers {
			if c.Device != "" && !slices.Contains(devs, c.Device) {
				devs = append(devs, c.Device)
			}
		}
	}
	if len(devs) == 0 {
		if b, err := ck.sys.ReadFile(o.procRoot + "/diskstats"); err == nil {
			if f := strings.Fields(string(b)); len(f) > 2 {
				devs = []string{f[2]}
			}
		}
	}
	if len(devs) == 0 {
		it.Status, it.Detail = stUnknown, "no block device to try it on"
		return it
	}
	if err := ck.loadProbe(devs); err != nil {
		it.Status, it.Detail = stMissing, fmt.Sprintf("would not load (%v): reads are timed by /proc/diskstats (mean only)", err)
		return it
	}
	it.Status, it.Detail = stOK, "loaded and removed again on "+strings.Join(devs, ",")
	return it
}

// writeCheck prints the report, one line per item.
func writeCheck(w io.Writer, r checkReport) {
	line := func(section, name, status, detail string) {
		fmt.Fprintf(w, "%-10s %-18s %-8s %s\n", section, name, status, detail)
	}
	file := r.Config.File
	if file == "" {
		file = "(built-in defaults)"
	}
	if r.Config.Error != "" {
		file += ": " + r.Config.Error
	}
	line("config", "file", r.Config.Status, file)
	for _, tn := range r.Config.Tenants {
		name := tn.Name
		if name == "" {
			name = "(unnamed)"
		}
		line("tenant", name, stOK, strings.Join(tn.Match, ", ")+": "+tn.Terms.String())
	}
	if r.Config.Conflict != "" {
		line("tenant", "conflict", stOK, "the "+r.Config.Conflict+" wins when a reservation and a read promise cannot both be met")
	}
	for _, it := range r.Kernel {
		line("kernel", it.Name, it.Status, it.Detail)
	}
	if r.Backend.Name != "" {
		line("backend", r.Backend.Name, r.Backend.Status, r.Backend.Why)
	}
	for _, it := range r.Capabilities {
		line("caps", it.Name, it.Status, it.Detail)
	}
	if r.Config.Error == "" {
		d := r.Discovery
		switch {
		case d.Status == stOff:
			line("discovery", "-", stOff, "manual mode discovers nothing")
		case d.Error != "":
			line("discovery", d.Adapter, d.Status, d.Error+" (the daemon retries every discovery.interval)")
		default:
			line("discovery", d.Adapter, d.Status, fmt.Sprintf("resources found: %d", len(d.Resources)))
			for _, res := range d.Resources {
				var cs []string
				for _, c := range res.Consumers {
					cs = append(cs, c.Addr+" on "+c.Device)
				}
				line("resource", res.Name, stOK, strings.Join(cs, ", "))
				if res.Writeback != "" {
					line("resource", res.Name, "note", res.Writeback)
				}
			}
		}
	}
	if r.WouldRun {
		fmt.Fprintln(w, "configuration OK: sanqos run would start")
	} else {
		fmt.Fprintf(w, "sanqos run would not start: %s\n", strings.Join(r.Reasons, "; "))
	}
}

const checkUsage = `Usage: sanqos check [--config FILE] [--json | --config-only] [run flags]

Say whether 'sanqos run' would start with this configuration, and why not,
without starting or changing anything (no rule installed, no module
loaded, discovery read-only):

  config     the file and the flags that override it, validated exactly as
             'sanqos run' validates them at start and on SIGHUP
  kernel     iptables flavour (nft or legacy), ipset, NFQUEUE, htb, netem,
             fq, clsact, cls_bpf, bpf, BTF, from the kernel's config and
             modules; the tc command; whether the eBPF block probe loads
             (it is loaded and removed again)
  backend    the backend run would open, why, and what of it this host lacks
  caps       root and the effective capabilities the run needs
  discovery  what the configured adapter finds now: resources and consumers,
             or its error

Exits 0 when run would start, 1 with the reasons when not. --json prints
the same as one JSON document (would_run, reasons, config, kernel,
backend, capabilities, discovery). --config-only validates the
configuration alone (the unit's ExecReload: what a reload can get
wrong), prints "configuration OK" and exits 0, or exits 1 with the
error. The flags are those of 'sanqos run'.
Settings that a reload cannot change (listen, socket, backend, tick) are
not compared with a running daemon: the daemon refuses those on SIGHUP
itself.
`
