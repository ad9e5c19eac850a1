package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeSocket is a notify socket that records what it receives.
func fakeSocket(t *testing.T) (string, *net.UnixConn) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

func TestSendAndEnv(t *testing.T) {
	p, c := fakeSocket(t)
	env := map[string]string{"NOTIFY_SOCKET": p, "WATCHDOG_USEC": "3000000", "WATCHDOG_PID": strconv.Itoa(os.Getpid())}
	n, err := fromEnv(func(k string) string { return env[k] }, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !n.Enabled() || n.WatchdogInterval() != 3*time.Second {
		t.Fatalf("enabled %v, watchdog %v; want true, 3s", n.Enabled(), n.WatchdogInterval())
	}
	if err := n.Send("READY=1", "STATUS=ok"); err != nil {
		t.Fatal(err)
	}
	if err := n.Reloading(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	k, _ := c.Read(buf)
	if got := string(buf[:k]); got != "READY=1\nSTATUS=ok" {
		t.Errorf("datagram %q", got)
	}
	k, _ = c.Read(buf)
	if got := string(buf[:k]); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Errorf("reloading datagram %q", got)
	}
	// Another process's watchdog, no socket, a bad value.
	env["WATCHDOG_PID"] = "1"
	if n, _ := fromEnv(func(k string) string { return env[k] }, os.Getpid()); n.WatchdogInterval() != 0 {
		t.Error("took the watchdog of another pid")
	}
	if n, err := fromEnv(func(string) string { return "" }, 1); err != nil || n.Enabled() || n.Send("READY=1") != nil {
		t.Error("without NOTIFY_SOCKET the notifier must be a silent no-op")
	}
	env["WATCHDOG_PID"], env["WATCHDOG_USEC"] = "", "soon"
	if _, err := fromEnv(func(k string) string { return env[k] }, 1); err == nil {
		t.Error("WATCHDOG_USEC=soon accepted")
	}
}
