package sim

import (
	"fmt"
	"os"
	"testing"
	"time"
)

func TestZZTrace(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	c := Cell{Disk: "raid6-hdd", Writers: Writers{Random: true, Bytes: 4 << 10, Threads: 12, IODepth: 1}, ThresholdMs: 50}
	o := MatrixOptions{Duration: 60 * time.Second, Seed: 1}
	sc, err := o.scenario(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Scenario, cfg.Controller, cfg.ThresholdMs = sc, "pid", c.ThresholdMs
	cfg.Duration, cfg.Seed = o.Duration, o.Seed
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Seconds[:15] {
		fmt.Printf("s %5.1f read %7.2f delay %6.2f wmb %6.2f on %v await %.1f\n", s.T, s.ReadMs, s.DelayMs, s.WriteMBs, s.WritersOn, s.WriteAwaitMs)
	}
	for _, k := range r.Ticks[100:170] {
		fmt.Printf("t %5.1f sig %7.2f raw %7.2f delay %6.2f m %d\n", k.T, k.SignalMs, k.RawMs, k.DelayMs, k.Members)
	}
}
