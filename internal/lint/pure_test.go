package lint

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// purePackages decide and simulate: they take numbers in and give a
// decision out, so they must build and test on any OS. The Makefile's vet
// target cross-compiles the same list for darwin (PURE_PKGS); keep them
// in step.
var purePackages = []string{
	"./internal/decide/engine/...",
	"./internal/decide/control/...",
	"./internal/decide/policy/...",
	"./internal/decide/smoothing/...",
	"./internal/sim/...",
	"./internal/observe/latency/...",
}

// kernelOnly are the import paths (prefixes) that touch the kernel: the
// data path (throttle, its NFQUEUE client nfq, the eBPF probe) and the
// netlink, unix-syscall and eBPF libraries under them. A pure package
// that links one of them has grown a dependency on Linux.
var kernelOnly = []string{
	"github.com/sanqos/sanqos/internal/act/throttle",
	"github.com/sanqos/sanqos/internal/act/nfqbackend",
	"github.com/sanqos/sanqos/internal/act/nfq",
	"github.com/sanqos/sanqos/internal/observe/blkprobe",
	"github.com/sanqos/sanqos/internal/daemon",
	"github.com/vishvananda/",
	"golang.org/x/sys/unix",
	"github.com/cilium/ebpf",
	"github.com/hanwen/go-fuse",
}

// TestPurePackagesImportNoKernel lists the dependencies of the pure
// packages and their tests, for linux and for darwin, with `go list -deps
// -test`, and fails on any kernel-facing one, naming who imports it.
func TestPurePackagesImportNoKernel(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to list the dependencies with")
	}
	root := moduleRoot(t)
	for _, goos := range []string{"linux", "darwin"} {
		args := append([]string{"list", "-deps", "-test", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}"}, purePackages...)
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
		out, err := cmd.Output()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			t.Fatalf("GOOS=%s go list -deps -test %s: %v\n%s", goos, strings.Join(purePackages, " "), err, msg)
		}
		bad := depsIn(string(out), kernelOnly)
		for _, b := range bad {
			t.Errorf("GOOS=%s: a pure package depends on %s", goos, b)
		}
		if len(bad) > 0 {
			t.Logf("move the kernel-facing part behind the daemon's adapter (internal/daemon/engine.go) instead")
		}
	}
}

// depsIn reads `go list -f '{{.ImportPath}}<tab>{{join .Imports " "}}'`
// output (a test variant's path has a space: "p [p.test]") and returns
// each package under one of the forbidden prefixes, as "pkg (imported by
// a, b)".
func depsIn(out string, forbidden []string) []string {
	importers := map[string][]string{}
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		pkg, imports, _ := strings.Cut(line, "\t")
		pkg, _, _ = strings.Cut(pkg, " ") // "p [p.test]" is p
		if pkg == "" {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if !under(imp, forbidden) {
				continue
			}
			if _, seen := importers[imp]; !seen {
				order = append(order, imp)
			}
			if !slices.Contains(importers[imp], pkg) {
				importers[imp] = append(importers[imp], pkg)
			}
		}
		if _, seen := importers[pkg]; !seen && under(pkg, forbidden) {
			order = append(order, pkg)
			importers[pkg] = nil
		}
	}
	var bad []string
	for _, p := range order {
		bad = append(bad, p+" (imported by "+strings.Join(importers[p], ", ")+")")
	}
	return bad
}

// under says whether path is one of the prefixes or below one (a prefix
// ending in "/" matches any path that starts with it).
func under(path string, prefixes []string) bool {
	for _, k := range prefixes {
		if path == k || strings.HasPrefix(path, k) && (strings.HasSuffix(k, "/") || strings.HasPrefix(path[len(k):], "/")) {
			return true
		}
	}
	return false
}

// The check can fail: the listing of a package that imports the data
// path is caught, with who imports it; a look-alike name is not.
func TestKernelDepsCatchesTheDataPath(t *testing.T) {
	out := "github.com/sanqos/sanqos/internal/decide/engine\tgithub.com/sanqos/sanqos/internal/act/throttle fmt\n" +
		"github.com/sanqos/sanqos/internal/decide/engine [github.com/sanqos/sanqos/internal/decide/engine.test]\tgithub.com/sanqos/sanqos/internal/act/throttle\n" +
		"github.com/sanqos/sanqos/internal/act/throttle\tgolang.org/x/sys/unix\n" +
		"golang.org/x/sys/unix\t\n" +
		"github.com/sanqos/sanqos/internal/nfqish\tfmt\n"
	got := depsIn(out, kernelOnly)
	want := []string{
		"github.com/sanqos/sanqos/internal/act/throttle (imported by github.com/sanqos/sanqos/internal/decide/engine)",
		"golang.org/x/sys/unix (imported by github.com/sanqos/sanqos/internal/act/throttle)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("kernelDeps =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// labOnly are what the lab and its reports bring: the emulated disk's FUSE
// file system, plotting, and the lab's own packages. The daemon runs on a
// storage target's data path and must not link them (cmd/sanqos-lab
// does).
var labOnly = []string{
	"github.com/sanqos/sanqos/internal/lab",
	"github.com/hanwen/go-fuse",
	"gonum.org/v1/plot",
}

// TestDaemonLinksNoLab lists what the sanqos daemon binary links and
// fails on the lab's FUSE disk, plotting or lab packages.
func TestDaemonLinksNoLab(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to list the dependencies with")
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}", "./cmd/sanqos")
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/sanqos: %v", err)
	}
	for _, b := range depsIn(string(out), labOnly) {
		t.Errorf("the sanqos daemon links %s; lab code belongs in cmd/sanqos-lab", b)
	}
}

// testOnly are packages of fakes for tests: compiled as ordinary packages
// so that the tests of several packages share them, but a fake runner or
// squatter in the daemon would be a bug waiting for a caller.
var testOnly = []string{
	"github.com/sanqos/sanqos/internal/act/acttest",
	"github.com/sanqos/sanqos/internal/act/plan/plantest",
}

// TestFakesOnlyInTests lists what every package imports outside its
// tests and fails on a package of test fakes.
func TestFakesOnlyInTests(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to list the dependencies with")
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}", "./...")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	for _, b := range depsIn(string(out), testOnly) {
		if !strings.HasSuffix(b, "(imported by )") {
			t.Errorf("%s: a package of test fakes is for _test.go files only", b)
		}
	}
}
