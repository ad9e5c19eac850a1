package experiments

import (
	"fmt"
	"time"

	"github.com/sanqos/sanqos/internal/serve/status"
)

// The NFS experiment (issue 17): fig5.11's workload over NFSv3 from
// nfs-ganesha in the target namespace, every client on one export and so
// on one device. The daemon is configured as a user would for NFS: the
// socket adapter on port 2049 finds the clients and, from ganesha's
// configuration, the export's device; attribution auto takes each
// client's write rate from the wire, since they share that device; the
// port's small-segment split (256 B) classes NFS's WRITE replies as what
// clocks a writer. Where device rates would have put the reader in the
// throttled set with the writers (the first run: every tick),
// the wire must keep it out.

// nfsExperiments are the experiments on the lab's NFS target.
func nfsExperiments() []Experiment {
	return []Experiment{{
		Name:  "nfs",
		Title: "Read-over-write control over NFS: fig5.11's workload on one nfs-ganesha export (issue 17)",
		Describe: "smalljob (8 KiB random reads at 256 kB/s) on b2 and 12 sequential 64 KiB writer threads on b3-b5 " +
			"(32 MiB per thread per burst, 5 s pause), each thread on a file of its own on one NFSv3 export " +
			"(nfs-ganesha, FSAL VFS, ext4 on a loop device of the emulated disk; libnfs clients, FILE_SYNC writes); " +
			"uncontrolled and sanqos pid at 15 ms with the socket adapter on port 2049 and attribution auto (the wire). " +
			"Beside the usual targets: the reader never in the throttled set.",
		refMs: 15,
		nfs:   true,
		plan:  nfsRuns,
		plots: plotInterference,
	}}
}

// nfsRuns: uncontrolled and pid at 15 ms, 300 s each (--short 120 s).
func nfsRuns(short bool) []plannedRun {
	total := runLength(short, 120*time.Second)
	w := interference(total)
	pid := Control{Controller: "pid", ThresholdMs: 15}
	return []plannedRun{{"none", w, Control{Controller: "none"}}, {pid.label(), w, pid}}
}

// SetMembership is how often one host was in a throttleable set, from
// the daemon's record: a consumer of its address marked throttleable.
type SetMembership struct {
	Host string `json:"host"`
	Addr string `json:"addr"`
	// Ticks is the ticks it was in a set, Of the ticks recorded.
	Ticks int `json:"ticks"`
	Of    int `json:"of"`
	// FirstS is its first such tick, in seconds since the loads' start
	// (-1: never).
	FirstS float64 `json:"first_s"`
}

// setMembership counts the ticks in which addr was throttleable.
func setMembership(recs []status.Record, host labHost, t0 float64) SetMembership {
	m := SetMembership{Host: host.name, Addr: host.addr, Of: len(recs), FirstS: -1}
	for _, r := range recs {
		for _, c := range r.Consumers {
			if c.Addr == host.addr && c.Throttleable {
				if m.FirstS < 0 {
					m.FirstS = round1(r.TS - t0)
				}
				m.Ticks++
				break
			}
		}
	}
	return m
}

// setChecks: in a controlled run the reader is never in the throttled
// set (it writes nothing), on NFS as on iSCSI.
func setChecks(s *Summary) []Check {
	var out []Check
	for _, r := range s.Runs {
		m := r.ReaderInSet
		if m == nil || r.ThresholdMs == nil {
			continue
		}
		got := "never"
		if m.Ticks > 0 {
			got = fmt.Sprintf("%d of %d ticks, first at %.1f s", m.Ticks, m.Of, m.FirstS)
		}
		out = append(out, Check{r.Name, fmt.Sprintf("reader (%s, %s) in the throttled set", m.Host, m.Addr), "never",
			got, m.Ticks == 0 && m.Of > 0})
	}
	return out
}
