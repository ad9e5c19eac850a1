package experiments

import (
	"flag"
	"reflect"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/loadspec"
)

// TestHarderWorkloadPlans: randw, surge24, guarantees and guarantees-ssd
// run 300 s each
// in full and shorter with --short, with the workloads the issue asks.
func TestHarderWorkloadPlans(t *testing.T) {
	for _, c := range []struct {
		name      string
		runs      []string
		job       string
		writers   int
		fullTotal time.Duration
	}{
		{"randw", []string{"none", "pid-15ms"}, "randwrite-8k", 24, 300 * time.Second},
		{"surge24", []string{"none", "pid-15ms"}, "seqwrite-64k", 24, 300 * time.Second},
		{"guarantees", []string{"readers-none", "readers-pid-15ms", "writer1-none", "writer1-pid-15ms"}, "", -1, 300 * time.Second},
		{"guarantees-ssd", []string{"fast-ssd-none", "fast-ssd-pid-1.16ms"}, "", 12, 300 * time.Second},
	} {
		x, err := Lookup(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := x.RunNames(false); !reflect.DeepEqual(got, c.runs) {
			t.Errorf("%s runs %v, want %v", c.name, got, c.runs)
		}
		for _, r := range x.plan(false) {
			if r.w.Total != c.fullTotal {
				t.Errorf("%s/%s lasts %s, want %s", c.name, r.name, r.w.Total, c.fullTotal)
			}
			if c.writers >= 0 && (r.w.Writers != c.writers || r.w.WriterJob != c.job || r.w.On == "") {
				t.Errorf("%s/%s workload %+v", c.name, r.name, r.w)
			}
		}
		for _, r := range x.plan(true) {
			if r.w.Total >= c.fullTotal {
				t.Errorf("%s --short: %s lasts %s", c.name, r.name, r.w.Total)
			}
		}
	}
	x, _ := Lookup("guarantees")
	p := x.plan(false)
	if p[0].w.Readers != 4 || p[0].w.Writers != 0 || p[2].w.Writers != 1 || p[2].w.On != "" || p[2].w.Name != p[3].w.Name {
		t.Errorf("guarantees workloads: %+v", p)
	}
}

// TestWriterArgs: continuous writers run their whole WriterTime, over
// their region again if they get to its end; on/off writers keep their
// bursts. The arguments must parse as the load generator's job.
func TestWriterArgs(t *testing.T) {
	cases := []struct {
		name      string
		w         Workload
		timeBased bool
		onBytes   int64
	}{
		{"continuous (fig5.8: 1 GiB a thread, 440 s)", Workload{WriterTime: 440 * time.Second, Writers: 12}, true, 0},
		{"bursts", Workload{WriterTime: 280 * time.Second, Writers: 12, On: "64m", Off: 5 * time.Second}, false, 64 << 20},
		{"random writers", Workload{WriterTime: 280 * time.Second, Writers: 24, WriterJob: "randwrite-8k"}, true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
			f := loadspec.BindFlags(fs)
			perThread := fs.Bool("per-thread", false, "")
			if err := fs.Parse(writerArgs(c.w, "b3", 4, 1024)); err != nil {
				t.Fatal(err)
			}
			j, err := f.Job()
			if err != nil {
				t.Fatal(err)
			}
			if j.TimeBased != c.timeBased || j.OnSize != c.onBytes || j.Runtime != c.w.WriterTime || j.Size != 1024<<20 || j.Threads != 4 || !*perThread {
				t.Errorf("job %+v (per-thread %v): want time-based %v, on %d, runtime %v, 1 GiB, 4 threads, per thread",
					j, *perThread, c.timeBased, c.onBytes, c.w.WriterTime)
			}
		})
	}
}
