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
	"./internal/engine/...",
	"./internal/control/...",
	"./internal/policy/...",
	"./internal/signal/...",
	"./internal/sim/...",
	"./internal/latency/...",
}

// kernelOnly are the import paths (prefixes) that touch the kernel: the
// data path (throttle, its NFQUEUE client nfq, the eBPF probe) and the
// netlink, unix-syscall and eBPF libraries under them. A pure package
// that links one of them has grown a dependency on Linux.
var kernelOnly = []string{
	"github.com/sanqos/sanqos/internal/throttle",
	"github.com/sanqos/sanqos/internal/nfq",
	"github.com/sanqos/sanqos/internal/blkprobe",
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
		bad := kernelDeps(string(out))
		for _, b := range bad {
			t.Errorf("GOOS=%s: a pure package depends on %s", goos, b)
		}
		if len(bad) > 0 {
			t.Logf("move the kernel-facing part behind the daemon's adapter (internal/daemon/engine.go) instead")
		}
	}
}

// kernelDeps reads `go list -f '{{.ImportPath}}<tab>{{join .Imports " "}}'`
// output (a test variant's path has a space: "p [p.test]") and returns
// each kernel-only package found, as "pkg (imported by a, b)".
func kernelDeps(out string) []string {
	importers := map[string][]string{}
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		pkg, imports, _ := strings.Cut(line, "\t")
		pkg, _, _ = strings.Cut(pkg, " ") // "p [p.test]" is p
		if pkg == "" {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if !isKernelOnly(imp) {
				continue
			}
			if _, seen := importers[imp]; !seen {
				order = append(order, imp)
			}
			if !slices.Contains(importers[imp], pkg) {
				importers[imp] = append(importers[imp], pkg)
			}
		}
		if _, seen := importers[pkg]; !seen && isKernelOnly(pkg) {
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

func isKernelOnly(path string) bool {
	for _, k := range kernelOnly {
		if path == k || strings.HasPrefix(path, k) && (strings.HasSuffix(k, "/") || strings.HasPrefix(path[len(k):], "/")) {
			return true
		}
	}
	return false
}

// The check can fail: the listing of a package that imports the data
// path is caught, with who imports it; a look-alike name is not.
func TestKernelDepsCatchesTheDataPath(t *testing.T) {
	out := "github.com/sanqos/sanqos/internal/engine\tgithub.com/sanqos/sanqos/internal/throttle fmt\n" +
		"github.com/sanqos/sanqos/internal/engine [github.com/sanqos/sanqos/internal/engine.test]\tgithub.com/sanqos/sanqos/internal/throttle\n" +
		"github.com/sanqos/sanqos/internal/throttle\tgolang.org/x/sys/unix\n" +
		"golang.org/x/sys/unix\t\n" +
		"github.com/sanqos/sanqos/internal/nfqish\tfmt\n"
	got := kernelDeps(out)
	want := []string{
		"github.com/sanqos/sanqos/internal/throttle (imported by github.com/sanqos/sanqos/internal/engine)",
		"golang.org/x/sys/unix (imported by github.com/sanqos/sanqos/internal/throttle)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("kernelDeps =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
