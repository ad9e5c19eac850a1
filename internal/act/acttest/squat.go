package acttest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Squat binds the abstract names of the locks of earlier versions,
// @sanqos-instance-<name>, from a process running as nobody (uid 65534)
// in network namespace netns ("": this one), as any local user can, and
// keeps them until the test ends.
func Squat(t *testing.T, netns string, names ...string) { SquatAs(t, 65534, netns, names...) }

// SquatAs is Squat as uid.
func SquatAs(t *testing.T, uid int, netns string, names ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs a squatter as uid 65534")
	}
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skipf("needs /usr/bin/python3 for the squatter: %v", err)
	}
	script := `import socket, sys, time
socks = []
for n in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    s.bind("\0sanqos-instance-" + n)
    socks.append(s)
print("bound", flush=True)
time.sleep(600)
`
	argv := []string{"setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups", py, "-c", script}
	if netns != "" {
		argv = append([]string{"ip", "netns", "exec", netns}, argv...)
	}
	cmd := exec.Command(argv[0], append(argv[1:], names...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the squatter: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "bound" {
		t.Fatalf("the squatter did not bind %v: %q %s", names, line, stderr.String())
	}
}

// RemoveLockFile removes, when the test ends, the lock file a test
// instance leaves in the lock directory (released first; never done by
// sanqos itself, see owned.LockDir). lockPath is owned.LockPath: passed
// in because owned's own tests use this package.
func RemoveLockFile(t *testing.T, lockPath func(ns int, name string) (string, error), ns int, name string) {
	t.Helper()
	p, err := lockPath(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
}
