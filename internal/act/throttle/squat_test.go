package throttle

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/act/owned"
)

// squat binds the abstract names of the locks of earlier versions,
// @sanqos-instance-<name>, from a process running as nobody (uid 65534)
// in network namespace netns ("": this one), as any local user can, and
// keeps them until the test ends.
func squat(t *testing.T, netns string, names ...string) { squatAs(t, 65534, netns, names...) }

// squatAs is squat as uid.
func squatAs(t *testing.T, uid int, netns string, names ...string) {
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

// removeLockFile removes the lock file a test instance left in LockDir
// (released first; never done by sanqos itself, see LockDir).
func removeLockFile(t *testing.T, ns int, name string) {
	t.Helper()
	p, err := owned.LockPath(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
}
