package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/serve/status"
)

// cmdTop is a live terminal view of the running daemon.
func cmdTop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("top", "sanqos top [--socket PATH] [--addr 127.0.0.1:9469] [--interval 1s] [--iterations N]",
		`Show the running daemon live: per shared resource a bar of the read-latency
signal against its threshold ('|'; '#' is the part over it), the packet
delay and the throttled members; then the consumers that write most.
As root it asks the daemon's control socket, falling back to HTTP (see
'sanqos status -h'). Press q or Ctrl-C to quit.`, stderr)
	client := statusFlags(fs)
	interval := fs.Duration("interval", time.Second, "refresh period")
	iterations := fs.Int("iterations", 0, "quit after this many frames (0: run until q or Ctrl-C)")
	consumers := fs.Int("consumers", 10, "how many top writers to list")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *interval < 10*time.Millisecond {
		return usageError(fs, "--interval %v is too short: use 10ms or more", *interval)
	}
	if *iterations < 0 || *consumers < 1 {
		return usageError(fs, "--iterations must be ≥ 0 and --consumers ≥ 1")
	}
	// Fail at once, with the daemon hint, if nothing is listening.
	s, err := client.get(ctx)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tty := terminalOf(stdout)
	if tty != nil {
		if restore, err := cbreak(os.Stdin); err == nil {
			defer restore()
			go waitForQuit(os.Stdin, cancel)
		}
		fmt.Fprint(stdout, "\x1b[?25l") // hide the cursor while redrawing
		defer fmt.Fprint(stdout, "\x1b[?25h")
	}
	tk := time.NewTicker(*interval)
	defer tk.Stop()
	for frame := 1; ; frame++ {
		opts := status.TopOptions{Width: 100, Consumers: *consumers}
		if tty != nil {
			opts.Width = termWidth(tty)
			fmt.Fprint(stdout, "\x1b[H\x1b[2J") // home, clear
		}
		out := status.RenderTop(s, opts)
		if err != nil {
			out = fmt.Sprintf("(%v — showing the last data)\n", err) + out
		}
		if tty != nil {
			out += "\nq: quit"
		}
		fmt.Fprintln(stdout, out)
		if *iterations > 0 && frame >= *iterations {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
		var ns status.Status
		if ns, err = client.get(ctx); err == nil {
			s = ns
		} else if errors.Is(err, context.Canceled) {
			return nil
		}
	}
}

// terminalOf returns w as a file when it is a terminal.
func terminalOf(w io.Writer) *os.File {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return nil
	}
	return f
}

func termWidth(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 80
	}
	return int(ws.Col)
}

// cbreak makes single key presses readable without Enter or echo and
// returns the function that restores the terminal. Ctrl-C keeps working
// (ISIG stays on), so the signal context ends top as well.
func cbreak(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("reading terminal settings: %w", err)
	}
	t := *old
	t.Lflag &^= unix.ICANON | unix.ECHO
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, fmt.Errorf("setting terminal to cbreak: %w", err)
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

func waitForQuit(r io.Reader, quit func()) {
	b := make([]byte, 1)
	for {
		if _, err := r.Read(b); err != nil {
			return
		}
		if b[0] == 'q' || b[0] == 'Q' {
			quit()
			return
		}
	}
}
