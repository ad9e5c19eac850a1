// Package sdnotify is a minimal client of systemd's notification protocol
// (sd_notify(3)): READY=1, RELOADING=1, STOPPING=1 and the watchdog's
// WATCHDOG=1, sent as datagrams to the unix socket in $NOTIFY_SOCKET.
// Outside systemd (no NOTIFY_SOCKET) every call is a no-op, so the daemon
// runs the same from a shell. Hand-written: the protocol is one sendto,
// and the daemon stays a pure-Go static binary without another module.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Notifier sends states to systemd. The zero value (and nil) is a no-op.
type Notifier struct {
	addr *net.UnixAddr
	// watchdog is the interval systemd expects WATCHDOG=1 within; 0 when
	// the unit has no WatchdogSec (or it is meant for another process).
	watchdog time.Duration
}

// New returns a notifier for the socket at path with the given watchdog
// interval (0: none), for tests and for callers that know better than
// the environment.
func New(path string, watchdog time.Duration) *Notifier {
	return &Notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}, watchdog: watchdog}
}

// FromEnv reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID. It does
// not unset them: a helper the daemon starts is not a systemd service.
func FromEnv() (*Notifier, error) {
	return fromEnv(os.Getenv, os.Getpid())
}

func fromEnv(getenv func(string) string, pid int) (*Notifier, error) {
	n := &Notifier{}
	path := getenv("NOTIFY_SOCKET")
	if path == "" {
		return n, nil
	}
	switch {
	case strings.HasPrefix(path, "@"):
		// Abstract socket: the kernel's name starts with a NUL byte, which
		// Go writes for a leading '@'.
	case strings.HasPrefix(path, "/"):
	default:
		return nil, fmt.Errorf("NOTIFY_SOCKET=%q: want an absolute path or @abstract name", path)
	}
	n.addr = &net.UnixAddr{Name: path, Net: "unixgram"}
	if us := getenv("WATCHDOG_USEC"); us != "" {
		if p := getenv("WATCHDOG_PID"); p != "" && p != strconv.Itoa(pid) {
			return n, nil // the watchdog is someone else's
		}
		v, err := strconv.ParseUint(us, 10, 63)
		if err != nil || v == 0 {
			return nil, fmt.Errorf("WATCHDOG_USEC=%q: want a positive number of microseconds", us)
		}
		n.watchdog = time.Duration(v) * time.Microsecond
	}
	return n, nil
}

// Enabled reports whether there is a systemd to notify.
func (n *Notifier) Enabled() bool { return n != nil && n.addr != nil }

// WatchdogInterval is the interval within which WATCHDOG=1 must be sent,
// 0 when there is no watchdog.
func (n *Notifier) WatchdogInterval() time.Duration {
	if n == nil {
		return 0
	}
	return n.watchdog
}

// Send sends one or more "KEY=value" lines in one datagram.
func (n *Notifier) Send(states ...string) error {
	if !n.Enabled() {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("connecting to systemd's notify socket %s: %w", n.addr.Name, err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(strings.Join(states, "\n"))); err != nil {
		return fmt.Errorf("notifying systemd at %s: %w", n.addr.Name, err)
	}
	return nil
}

// Reloading is RELOADING=1 with the CLOCK_MONOTONIC time systemd (253+,
// Type=notify-reload) wants beside it; READY=1 must follow when done.
func (n *Notifier) Reloading() error {
	if !n.Enabled() {
		return nil
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return n.Send("RELOADING=1")
	}
	return n.Send("RELOADING=1", "MONOTONIC_USEC="+strconv.FormatInt(ts.Nano()/1000, 10))
}
