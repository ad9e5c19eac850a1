package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// checkSystem is everything 'sanqos check' reads about the host, so that
// each probe is tested on fixtures captured from real hosts
// (testdata/check/*). Every method only reads: check never loads a module,
// installs a rule or writes a file.
type checkSystem interface {
	// ReadFile reads an absolute path of the host.
	ReadFile(path string) ([]byte, error)
	// Exists reports whether an absolute path of the host exists.
	Exists(path string) bool
	// LookPath reports whether a command is on PATH.
	LookPath(name string) bool
	// Output runs a command that only prints (iptables -V) and returns
	// its output.
	Output(ctx context.Context, name string, args ...string) (string, error)
}

// hostSystem is the real host.
type hostSystem struct{}

func (hostSystem) ReadFile(p string) ([]byte, error) { return os.ReadFile(p) }

func (hostSystem) Exists(p string) bool { _, err := os.Stat(p); return err == nil }

func (hostSystem) LookPath(name string) bool { _, err := exec.LookPath(name); return err == nil }

func (hostSystem) Output(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// fixtureSystem is a host captured in a directory: its files under
// root/fs (fs/proc/config.gz, fs/proc/self/status, ...), a command's
// presence as root/bin/NAME and its output as root/out/NAME_ARGS.
type fixtureSystem struct{ root string }

func (f fixtureSystem) ReadFile(p string) ([]byte, error) {
	return os.ReadFile(filepath.Join(f.root, "fs", p))
}

func (f fixtureSystem) Exists(p string) bool {
	_, err := os.Stat(filepath.Join(f.root, "fs", p))
	return err == nil
}

func (f fixtureSystem) LookPath(name string) bool {
	_, err := os.Stat(filepath.Join(f.root, "bin", name))
	return err == nil
}

func (f fixtureSystem) Output(_ context.Context, name string, args ...string) (string, error) {
	if !f.LookPath(name) {
		return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
	}
	b, err := os.ReadFile(filepath.Join(f.root, "out", strings.Join(append([]string{name}, args...), "_")))
	return string(b), err
}

// Statuses of a check line.
const (
	stOK      = "ok"
	stModule  = "module"  // a loadable module, not loaded: the first use loads it
	stMissing = "missing" // the kernel (or host) has it not
	stUnknown = "unknown" // nothing says either way
	stError   = "error"
	stOff     = "off" // disabled by the configuration
)

// kernelInfo is what the kernel's build configuration and its loaded
// modules say: /proc/config.gz (or /boot/config-RELEASE), /proc/modules,
// and modules.builtin and modules.dep under /lib/modules/RELEASE.
type kernelInfo struct {
	release  string
	config   map[string]string // CONFIG_X -> y, m; "n" when "is not set"
	source   string            // where config came from; "" when not found
	loaded   map[string]bool
	builtin  map[string]bool
	loadable map[string]bool
	modules  bool // the kernel takes modules (CONFIG_MODULES)
}

func readKernelInfo(sys checkSystem) kernelInfo {
	k := kernelInfo{config: map[string]string{}, loaded: map[string]bool{}, builtin: map[string]bool{}, loadable: map[string]bool{}}
	if b, err := sys.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		k.release = strings.TrimSpace(string(b))
	}
	if b, err := sys.ReadFile("/proc/config.gz"); err == nil {
		if zr, err := gzip.NewReader(bytes.NewReader(b)); err == nil {
			if text, err := io.ReadAll(zr); err == nil {
				k.config, k.source = parseKernelConfig(text), "/proc/config.gz"
			}
		}
	}
	if k.source == "" && k.release != "" {
		p := "/boot/config-" + k.release
		if b, err := sys.ReadFile(p); err == nil {
			k.config, k.source = parseKernelConfig(b), p
		}
	}
	k.modules = k.config["CONFIG_MODULES"] == "y" || k.source == ""
	if b, err := sys.ReadFile("/proc/modules"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				k.loaded[f[0]] = true
			}
		}
	}
	dir := "/lib/modules/" + k.release + "/"
	modName := func(path string) string {
		base := filepath.Base(strings.TrimSuffix(strings.TrimSpace(path), ":"))
		base, _, _ = strings.Cut(base, ".ko")
		return strings.ReplaceAll(base, "-", "_")
	}
	if b, err := sys.ReadFile(dir + "modules.builtin"); err == nil {
		for _, l := range strings.Fields(string(b)) {
			k.builtin[modName(l)] = true
		}
	}
	if b, err := sys.ReadFile(dir + "modules.dep"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f, _, ok := strings.Cut(l, ":"); ok {
				k.loadable[modName(f)] = true
			}
		}
	}
	return k
}

// parseKernelConfig reads a kernel .config: CONFIG_X=y|m|value, and
// "# CONFIG_X is not set" as "n".
func parseKernelConfig(b []byte) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := sc.Text()
		if name, ok := strings.CutPrefix(l, "# "); ok {
			if name, ok = strings.CutSuffix(name, " is not set"); ok {
				m[name] = "n"
			}
			continue
		}
		if k, v, ok := strings.Cut(l, "="); ok && strings.HasPrefix(k, "CONFIG_") {
			m[k] = v
		}
	}
	return m
}

// kpart is one kernel part a feature needs: its CONFIG option, its
// module, and (optional) a file that exists exactly when it is in the
// running kernel now.
type kpart struct {
	config, module, live string
}

// state says whether the kernel has p, and where that was read.
func (k kernelInfo) state(sys checkSystem, p kpart) (string, string) {
	if p.live != "" && sys.Exists(p.live) {
		return stOK, p.live
	}
	switch {
	case k.loaded[p.module]:
		return stOK, p.module + " loaded"
	case k.builtin[p.module]:
		return stOK, p.module + " built in"
	}
	switch k.config[p.config] {
	case "y":
		return stOK, p.config + "=y"
	case "m":
		if k.modules {
			return stModule, p.config + "=m, " + p.module + " not loaded"
		}
	case "n":
		return stMissing, p.config + " is not set"
	}
	if k.loadable[p.module] {
		return stModule, p.module + " not loaded"
	}
	if k.source != "" {
		return stMissing, p.config + " not in " + k.source
	}
	return stUnknown, "no kernel config (/proc/config.gz, /boot/config-" + k.release + ") and no module " + p.module
}

// feature is one line of the kernel section: what it is, and the parts
// it needs, all of them.
type feature struct {
	name, what string
	parts      []kpart
}

// kernelFeatures are the kernel parts the backends and the probe use.
var kernelFeatures = []feature{
	{"ipset", "ip sets of the throttled addresses", []kpart{
		{"CONFIG_IP_SET", "ip_set", ""}, {"CONFIG_IP_SET_HASH_IP", "ip_set_hash_ip", ""}}},
	{"mangle", "iptables mangle table", []kpart{{"CONFIG_IP_NF_MANGLE", "iptable_mangle", ""}}},
	{"nfqueue", "NFQUEUE target and nfnetlink_queue", []kpart{
		{"CONFIG_NETFILTER_NETLINK_QUEUE", "nfnetlink_queue", "/proc/net/netfilter/nfnetlink_queue"},
		{"CONFIG_NETFILTER_XT_TARGET_NFQUEUE", "xt_NFQUEUE", ""}}},
	{"htb", "HTB qdisc", []kpart{{"CONFIG_NET_SCH_HTB", "sch_htb", ""}}},
	{"netem", "netem qdisc", []kpart{{"CONFIG_NET_SCH_NETEM", "sch_netem", ""}}},
	{"fq", "fq qdisc (departure times)", []kpart{{"CONFIG_NET_SCH_FQ", "sch_fq", ""}}},
	{"clsact", "clsact qdisc", []kpart{{"CONFIG_NET_SCH_INGRESS", "sch_ingress", ""}}},
	{"cls_bpf", "tc BPF classifier", []kpart{{"CONFIG_NET_CLS_BPF", "cls_bpf", ""}}},
	{"bpf", "bpf(2)", []kpart{{"CONFIG_BPF_SYSCALL", "bpf", "/sys/fs/bpf"}}},
	{"dm", "device-mapper (LVM and dm resources)", []kpart{{"CONFIG_BLK_DEV_DM", "dm_mod", "/sys/module/dm_mod"}}},
	{"btf", "kernel BTF", []kpart{{"CONFIG_DEBUG_INFO_BTF", "btf", "/sys/kernel/btf/vmlinux"}}},
}

// probeFeature says whether the kernel has f: the worst of its parts.
func probeFeature(sys checkSystem, k kernelInfo, f feature) checkItem {
	it := checkItem{Name: f.name, Status: stOK}
	var why []string
	rank := map[string]int{stOK: 0, stModule: 1, stUnknown: 2, stMissing: 3}
	for _, p := range f.parts {
		st, d := k.state(sys, p)
		why = append(why, d)
		if rank[st] > rank[it.Status] {
			it.Status = st
		}
	}
	it.Detail = f.what + ": " + strings.Join(why, ", ")
	return it
}

// probeIptables reads the flavour from 'iptables -V': "iptables v1.8.9
// (nf_tables)" or "(legacy)".
func probeIptables(ctx context.Context, sys checkSystem) checkItem {
	it := checkItem{Name: "iptables"}
	if !sys.LookPath("iptables") {
		it.Status, it.Detail = stMissing, "no iptables on PATH (Debian: apt install iptables)"
		return it
	}
	out, err := sys.Output(ctx, "iptables", "-V")
	out = strings.TrimSpace(out)
	if err != nil {
		it.Status, it.Detail = stError, fmt.Sprintf("iptables -V: %v: %s", err, out)
		return it
	}
	switch {
	case strings.Contains(out, "(nf_tables)"):
		it.Status, it.Detail = stOK, "nft ("+out+")"
	case strings.Contains(out, "(legacy)"):
		it.Status, it.Detail = stOK, "legacy ("+out+")"
	default:
		it.Status, it.Detail = stOK, "flavour unknown ("+out+")"
	}
	if !sys.LookPath("ip6tables") {
		it.Detail += "; no ip6tables: IPv6 consumers are refused"
	}
	return it
}

// probeTools says whether the commands the backends run are there.
func probeTools(sys checkSystem) []checkItem {
	var items []checkItem
	for _, t := range []struct{ name, what string }{
		{"ipset", "not run by sanqos (it uses netlink); listing sets by hand"},
		{"tc", "netem, htb, rate_dev and edt backends"},
	} {
		it := checkItem{Name: t.name + " command", Status: stOK, Detail: t.what}
		if !sys.LookPath(t.name) {
			it.Status = stMissing
		}
		items = append(items, it)
	}
	return items
}

// Capabilities (linux/capability.h) that the daemon's parts use.
var capNames = map[int]string{
	12: "CAP_NET_ADMIN", 13: "CAP_NET_RAW", 19: "CAP_SYS_PTRACE", 23: "CAP_SYS_NICE",
	38: "CAP_PERFMON", 39: "CAP_BPF",
}

// effectiveCaps reads the process's effective capability set.
func effectiveCaps(sys checkSystem) (uint64, error) {
	b, err := sys.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("reading the capabilities: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("reading the capabilities: no CapEff in /proc/self/status")
}
