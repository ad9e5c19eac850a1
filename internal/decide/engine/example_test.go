package engine_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// A reader (loop0) waits 50 ms per read while a writer (loop1) streams
// 20 MB/s to the same resource: after one second the writer is in the
// throttleable set and gets a delay.
func ExampleEngine_Step() {
	topo := topology.Topology{Resources: []topology.Resource{{
		Name: "vg-data",
		Consumers: []topology.Consumer{
			{Addr: netip.MustParseAddr("10.0.0.2"), Device: "loop0"},
			{Addr: netip.MustParseAddr("10.0.0.3"), Device: "loop1"},
		},
	}}}
	e, err := engine.New(engine.DefaultConfig(), topo)
	if err != nil {
		fmt.Println(err)
		return
	}
	reader := diskstats.Stat{Device: "loop0", Fields: 20}
	writer := diskstats.Stat{Device: "loop1", Fields: 20}
	now := time.Unix(0, 0)
	var d engine.Decision
	for tick := 0; tick <= 10; tick++ {
		d = e.Step(now, []diskstats.Stat{reader, writer})
		now = now.Add(100 * time.Millisecond)
		reader.ReadIOs, reader.ReadTicks = reader.ReadIOs+10, reader.ReadTicks+500
		writer.WriteIOs, writer.WriteSectors = writer.WriteIOs+32, writer.WriteSectors+4096
	}
	r := d.Resources[0]
	fmt.Printf("%s: signal %.1f ms > %.0f ms, delay %.1f ms for %v\n", r.Name, r.SignalMs, r.ThresholdMs, r.DelayMs, r.Members)
	g := d.Throttles()[0]
	fmt.Printf("throttle %s: %v %s delay %v\n", g.Name, g.Members, g.Direction, g.Delay)
	// Output:
	// vg-data: signal 47.2 ms > 15 ms, delay 20.0 ms for [10.0.0.3]
	// throttle vg-data: [10.0.0.3] write delay 20ms
}
