// Package journal makes the daemon's log readable by priority in the
// systemd journal: when stderr is the journal's stream (JOURNAL_STREAM
// names its device and inode), every line gets the sd-daemon prefix <N>
// of its level, so that 'journalctl -p warning' shows warnings and
// errors. Anywhere else the log is left exactly as slog writes it.
package journal

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Priorities of sd-daemon(3) (syslog's): what journald files a line under.
const (
	prioErr     = 3
	prioWarning = 4
	prioInfo    = 6
	prioDebug   = 7
)

// Priority maps a slog level to the syslog priority journald stores.
// Levels between slog's named ones take the next lower named one's, as
// slog itself prints them (Info+2 is "INFO+2", still informational).
func Priority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return prioErr
	case l >= slog.LevelWarn:
		return prioWarning
	case l >= slog.LevelInfo:
		return prioInfo
	default:
		return prioDebug
	}
}

// Connected reports whether f is the stream journald gave this process:
// systemd sets JOURNAL_STREAM=DEV:INO (decimal) for a unit whose output
// goes to the journal. A child that inherited the variable but writes
// elsewhere (a redirected stderr, a terminal) does not match, so its
// output keeps no prefixes.
func Connected(f *os.File, journalStream string) bool {
	devStr, inoStr, ok := strings.Cut(journalStream, ":")
	if !ok || f == nil {
		return false
	}
	dev, err1 := strconv.ParseUint(devStr, 10, 64)
	ino, err2 := strconv.ParseUint(inoStr, 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	// The conversions: Dev and Ino differ in type between platforms.
	return uint64(st.Dev) == dev && uint64(st.Ino) == ino
}

// NewHandler returns slog's text handler on w, and when w is the
// journal's stream (Connected, with the JOURNAL_STREAM of the
// environment) one that prefixes each line with its priority.
func NewHandler(w io.Writer, opts *slog.HandlerOptions) slog.Handler {
	if f, ok := w.(*os.File); ok && Connected(f, os.Getenv("JOURNAL_STREAM")) {
		return NewPriorityHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}

// NewPriorityHandler returns a text handler whose every line starts with
// <N>, N the record's Priority, whatever w is.
func NewPriorityHandler(w io.Writer, opts *slog.HandlerOptions) slog.Handler {
	pw := &prefixWriter{w: w}
	return &priorityHandler{inner: slog.NewTextHandler(pw, opts), pw: pw}
}

// priorityHandler sets the prefix of the shared writer, then lets the
// text handler write the record. The text handler writes a record in one
// Write, and the lock spans the pair, so that no record takes another's
// prefix; handlers derived by WithAttrs and WithGroup share writer and
// lock.
type priorityHandler struct {
	inner slog.Handler
	pw    *prefixWriter
}

type prefixWriter struct {
	mu     sync.Mutex // held across prefix setting and the inner Handle
	w      io.Writer
	prefix []byte
	buf    []byte
}

// Write writes prefix and p in one write, so that journald reads the
// priority and the line together.
func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(append(p.buf[:0], p.prefix...), b...)
	if _, err := p.w.Write(p.buf); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (h *priorityHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *priorityHandler) Handle(ctx context.Context, r slog.Record) error {
	h.pw.mu.Lock()
	defer h.pw.mu.Unlock()
	h.pw.prefix = fmt.Appendf(h.pw.prefix[:0], "<%d>", Priority(r.Level))
	return h.inner.Handle(ctx, r)
}

func (h *priorityHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &priorityHandler{inner: h.inner.WithAttrs(attrs), pw: h.pw}
}

func (h *priorityHandler) WithGroup(name string) slog.Handler {
	return &priorityHandler{inner: h.inner.WithGroup(name), pw: h.pw}
}
