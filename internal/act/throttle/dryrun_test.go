package throttle

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestDryRunLogsChangesOnly: each new state is logged once; repeating it
// (in any group order) logs nothing.
func TestDryRunLogsChangesOnly(t *testing.T) {
	var buf bytes.Buffer
	b := NewDryRun(slog.New(slog.NewTextHandler(&buf, nil)))
	ctx := context.Background()
	s := State{Groups: []Group{
		{Name: "b", Members: []netip.Addr{ip("10.0.0.3")}, WriteDelay: 4600 * time.Microsecond},
		{Name: "a", Members: []netip.Addr{ip("10.0.0.2")}, ReadDelay: time.Millisecond},
	}}
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	first := buf.String()
	if strings.Count(first, "would throttle") != 2 || !strings.Contains(first, "write_delay=4.6ms") {
		t.Fatalf("first apply logged %q, want both groups with their delays", first)
	}
	s.Groups[0], s.Groups[1] = s.Groups[1], s.Groups[0]
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if buf.String() != first {
		t.Fatalf("the same state logged again: %q", strings.TrimPrefix(buf.String(), first))
	}
	if err := b.Apply(ctx, State{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "would remove all throttles") {
		t.Fatalf("empty state not logged: %q", buf.String())
	}
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }
