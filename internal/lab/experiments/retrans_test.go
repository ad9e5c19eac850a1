package experiments

import (
	"os"
	"reflect"
	"testing"
)

func TestRetransmitEvents(t *testing.T) {
	s := func(tt, steal float64, kv ...any) tcpSample {
		m := map[string]uint64{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = uint64(kv[i+1].(int))
		}
		return tcpSample{T: tt, Retrans: m, StealMs: steal}
	}
	// Takeovers count up from the daemon's start: 2 before the second
	// (1, 2], 3 more in it.
	ticks := []Tick{{T: 0.9, Takeovers: 2}, {T: 1.5, HoldErrMs: 0.3, YieldMs: 4, Takeovers: 4}, {T: 1.9, HoldErrMs: 7.5, WakeLateMs: 6, Takeovers: 5},
		{T: 2.1, HoldErrMs: 30, YieldMs: 25, Takeovers: 6}, {T: 3.0, HoldErrMs: 0.2, Takeovers: 6}}
	for _, tc := range []struct {
		name    string
		samples []tcpSample
		ticks   []Tick
		want    []RetransmitEvent
	}{
		{"none", []tcpSample{s(0, 0, "b3", 5), s(1, 0, "b3", 5)}, ticks, nil},
		{"one second, two hosts, ticks of that second only",
			[]tcpSample{s(1, 100, "b3", 5, "b4", 2), s(2, 110, "b3", 7, "b4", 3), s(3, 110, "b3", 7, "b4", 3)}, ticks,
			[]RetransmitEvent{{T: 2, Host: "b3", Segments: 2, StealMs: 10, HoldErrorMaxMs: 7.5, YieldMaxMs: 4, WakeLateMaxMs: 6, Takeovers: 3},
				{T: 2, Host: "b4", Segments: 1, StealMs: 10, HoldErrorMaxMs: 7.5, YieldMaxMs: 4, WakeLateMaxMs: 6, Takeovers: 3}}},
		{"a host unseen before (not yet in its namespace) is no event",
			[]tcpSample{s(1, 0), s(2, 0, "b5", 9), s(3, 0, "b5", 10)}, nil,
			[]RetransmitEvent{{T: 3, Host: "b5", Segments: 1}}},
		{"a counter going down (namespace gone, pid reused) is no event",
			[]tcpSample{s(1, 0, "b3", 9), s(2, 0, "b3", 0)}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := retransmitEvents(tc.samples, tc.ticks)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if got := stealDuring([]tcpSample{s(0, 100), s(1, 120), s(2, 150)}); got != 50 {
		t.Errorf("stealDuring = %v, want 50", got)
	}
	if got := describeEvents([]RetransmitEvent{{T: 2, Host: "b3", Segments: 2, StealMs: 10, HoldErrorMaxMs: 7.5, YieldMaxMs: 4, Takeovers: 1}}); got != "2 on b3 at 2 s (steal 10 ms, held late ≤ 7.5 ms, yield ≤ 4.0 ms, woken late ≤ 0.0 ms, standby took over 1×)" {
		t.Errorf("describeEvents = %q", got)
	}
}

// TestInNamespace: a process is not in a namespace that does not exist,
// which is what the sampler sees for a load generator that ended.
func TestInNamespace(t *testing.T) {
	if inNamespace(os.Getpid(), "sanqos-no-such-namespace") {
		t.Error("in a namespace that does not exist")
	}
	if inNamespace(1<<30, "sanqos-no-such-namespace") {
		t.Error("a process that does not exist is in a namespace")
	}
}
