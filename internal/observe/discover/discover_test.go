package discover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/observe/topology"
)

// render prints a topology one consumer a line, for comparisons.
func render(t topology.Topology) string {
	var b strings.Builder
	for _, r := range t.Resources {
		fmt.Fprintf(&b, "%s %v\n", r.Name, r.Leaves)
		for _, c := range r.Consumers {
			fmt.Fprintf(&b, "  %s %s %s %s\n", c.Addr, strings.Join(c.IQNs, ","), c.Device, c.Backing)
		}
	}
	return b.String()
}

// End to end over fixtures: LIO configfs + the topology fixture sysfs.
func TestDiscoverLIO(t *testing.T) {
	res := topology.NewResolver("../topology/testdata/sys", "../topology/testdata/dev", "../topology/testdata/mountinfo")
	d := New(NewLIO("testdata/lio/target"), res, slog.New(slog.DiscardHandler))
	topo, err := d.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := `disk-sde [sde]
  192.0.2.13 iqn.1994-05.com.redhat:host3 sde /dev/sde
  2001:db8::13 iqn.1994-05.com.redhat:host3 sde /dev/sde
fs-sda2 [sda]
  192.0.2.11 iqn.1994-05.com.redhat:host1 sda2 /srv/images/a.img
vg-data [sdb sdc]
  192.0.2.11 iqn.1994-05.com.redhat:host1 dm-0 /dev/mapper/data-lun1
`
	if got := render(topo); got != want {
		t.Errorf("topology:\n%s\nwant:\n%s", got, want)
	}
}

type fakeResolver map[string]topology.Resolution

func (f fakeResolver) Resolve(b string) (topology.Resolution, error) {
	if r, ok := f[b]; ok {
		return r, nil
	}
	return topology.Resolution{}, errors.New("no such device")
}

// The tgt capture: lun-idle has no session, lun-a2 cannot be resolved
// (logged once over two discoveries, and skipped).
func TestDiscoverTgt(t *testing.T) {
	fr := fakeResolver{
		"/srv/sanqos/lun-a1.img":     {Device: "loop0", Leaves: []string{"fs:/srv/sanqos"}, Name: "fs-srv/sanqos"},
		"/srv/sanqos/lun-shared.img": {Device: "loop2", Leaves: []string{"fs:/srv/sanqos"}, Name: "fs-srv/sanqos"},
		"/srv/sanqos/lun-idle.img":   {Device: "loop1", Leaves: []string{"sdz"}, Name: "disk-sdz"},
	}
	var logs bytes.Buffer
	d := New(NewTgt(&fileRunner{path: "testdata/tgt/show-target.txt"}, 2603), fr, slog.New(slog.NewTextHandler(&logs, nil)))
	var topo topology.Topology
	for range 2 {
		var err error
		if topo, err = d.Discover(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Two sessions from 10.206.2.2 to the shared LUN are one consumer
	// with both names: one device to measure, one address to throttle.
	want := `fs-srv-sanqos [fs:/srv/sanqos]
  10.206.1.2 iqn.2026-11.org.sanqos:init-a loop0 /srv/sanqos/lun-a1.img
  10.206.1.2 iqn.2026-11.org.sanqos:init-a loop2 /srv/sanqos/lun-shared.img
  10.206.2.2 iqn.2026-11.org.sanqos:init-b,iqn.2026-11.org.sanqos:init-b2 loop2 /srv/sanqos/lun-shared.img
`
	if got := render(topo); got != want {
		t.Errorf("topology:\n%s\nwant:\n%s", got, want)
	}
	if n := strings.Count(logs.String(), "lun-a2.img"); n != 1 {
		t.Errorf("unresolvable LUN logged %d times over two discoveries, want once:\n%s", n, logs.String())
	}
	// Logged once, but still listed after every discovery.
	if got := d.Unresolved(); len(got) != 1 || got[0] != "/srv/sanqos/lun-a2.img" {
		t.Errorf("Unresolved() = %q after two discoveries, want [/srv/sanqos/lun-a2.img]", got)
	}
	fr["/srv/sanqos/lun-a2.img"] = topology.Resolution{Device: "loop3", Leaves: []string{"fs:/srv/sanqos"}, Name: "fs-srv/sanqos"}
	if _, err := d.Discover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := d.Unresolved(); len(got) != 0 {
		t.Errorf("Unresolved() = %q once the LUN resolves, want none", got)
	}
	// A failing adapter is an error, so the caller keeps its last topology.
	bad := New(NewTgt(&fileRunner{err: errors.New("connection refused")}, 2603), fr, nil)
	if _, err := bad.Discover(context.Background()); err == nil || !strings.Contains(err.Error(), "tgt") {
		t.Errorf("failing adapter: err = %v", err)
	}
}
