package iolog

import (
	"bytes"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

func readFixture(t *testing.T, name string) []Record {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := ReadRecords(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return recs
}

// The fixtures are real captures (testdata/capture.sh); these checks hold
// for any correct run, so they also guard the generator's arithmetic.
func TestFixturesAreConsistent(t *testing.T) {
	for _, tc := range []struct {
		file    string
		threads int
		op      string
	}{
		{"smalljob.jsonl", 2, OpRead},
		{"verify.jsonl", 2, OpRead},
		{"onoff.jsonl", 2, OpWrite},
	} {
		t.Run(tc.file, func(t *testing.T) {
			recs := readFixture(t, tc.file)
			last := recs[len(recs)-1]
			if last.Kind != KindSummary || last.Thread != 0 || last.Op != tc.op {
				t.Fatalf("last line is not the job summary of %s: %+v", tc.op, last)
			}
			sum, ok := Summary(recs, "")
			if !ok || !reflect.DeepEqual(sum, last) {
				t.Fatalf("Summary = %+v, %v; want the last line", sum, ok)
			}
			for _, op := range []string{OpRead, OpWrite} {
				iv := Select(recs, KindInterval, 0, op)
				s, ok := Summary(recs, op)
				if !ok {
					continue
				}
				var b, n int64
				for _, r := range iv {
					b += r.Bytes
					n += r.IOs
					if r.Dur > 0 && math.Abs(r.MBs-float64(r.Bytes)/r.Dur/1e6) > 0.01*r.MBs+0.002 {
						t.Errorf("t=%v: mb_s %v does not match bytes %d over %v s", r.T, r.MBs, r.Bytes, r.Dur)
					}
					if r.IOs > 0 && !(r.Lat.P50 <= r.Lat.P99 && r.Lat.P99 <= r.Lat.Max && r.Lat.Mean <= r.Lat.Max) {
						t.Errorf("t=%v: latency out of order %+v", r.T, r.Lat)
					}
				}
				if b != s.Bytes || n != s.IOs {
					t.Errorf("%s: intervals add up to %d bytes / %d I/Os, summary says %d / %d", op, b, n, s.Bytes, s.IOs)
				}
				var tb int64
				for th := 1; th <= tc.threads; th++ {
					ts := Select(recs, KindSummary, th, op)
					if len(ts) != 1 {
						t.Fatalf("thread %d %s: %d summaries", th, op, len(ts))
					}
					tb += ts[0].Bytes
				}
				if tb != s.Bytes {
					t.Errorf("%s: thread summaries add up to %d bytes, job summary %d", op, tb, s.Bytes)
				}
			}
		})
	}
}

func TestSmalljobFixtureSeries(t *testing.T) {
	recs := readFixture(t, "smalljob.jsonl")
	agg := Select(recs, KindInterval, 0, OpRead)
	if len(agg) != 3 {
		t.Fatalf("%d aggregate seconds, want 3", len(agg))
	}
	mbs := make([]float64, len(agg))
	for i, r := range agg {
		mbs[i] = r.MBs
	}
	// Two threads at 256 KiB/s each.
	if m := Mean(mbs); math.Abs(m-2*0.262144) > 0.03 {
		t.Errorf("mean aggregate rate %.3f MB/s, want about 0.524", m)
	}
	per := Select(recs, KindInterval, 1, OpRead)
	if len(per) != 3 {
		t.Errorf("thread 1 has %d seconds", len(per))
	}
	var xs []float64
	for th := 1; th <= 2; th++ {
		s := Select(recs, KindSummary, th, OpRead)
		xs = append(xs, s[0].MBs)
	}
	if j := JainIndex(xs); j < 0.99 {
		t.Errorf("equal rate-limited threads have Jain's index %v", j)
	}
}

func TestVerifyFixture(t *testing.T) {
	s, _ := Summary(readFixture(t, "verify.jsonl"), OpRead)
	if s.Verified == nil || s.Mismatches == nil || *s.Verified != s.IOs || *s.Mismatches != 0 {
		t.Fatalf("verify summary %+v", s)
	}
	w, _ := Summary(readFixture(t, "verify.jsonl"), OpWrite)
	if w.Verified != nil || w.Bytes != s.Bytes {
		t.Errorf("write summary %+v against read %+v", w, s)
	}
	if s, _ := Summary(readFixture(t, "smalljob.jsonl"), ""); s.Verified != nil {
		t.Error("a run without verify has a verified field")
	}
}

func TestReadIOs(t *testing.T) {
	f, err := os.Open("testdata/io.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ios, err := ReadIOs(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(ios) != 40 {
		t.Fatalf("%d I/Os", len(ios))
	}
	for _, io := range ios {
		if io.Len != 8192 || io.Offset%8192 != 0 || io.LatUs <= 0 || io.Op != OpRead || io.Thread < 1 || io.Thread > 2 {
			t.Errorf("odd I/O %+v", io)
		}
		// Thread regions are 4 MiB each, one after the other.
		if lo := int64(io.Thread-1) * 4 << 20; io.Offset < lo || io.Offset >= lo+4<<20 {
			t.Errorf("thread %d I/O outside its region: %+v", io.Thread, io)
		}
	}
}

func TestReadErrors(t *testing.T) {
	for _, tc := range []struct {
		file, want string
		good       int
	}{
		{"truncated.jsonl", "line 3", 1},
		{"badkind.jsonl", `line 2: unknown kind "bogus"`, 1},
	} {
		f, err := os.Open("testdata/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := ReadRecords(f)
		f.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) || len(recs) != tc.good {
			t.Errorf("%s: %d records, error %v; want %d and %q", tc.file, len(recs), err, tc.good, tc.want)
		}
	}
	if _, err := ReadIOs(strings.NewReader(`{"t":1,"op":"trim"}`)); err == nil {
		t.Error("unknown op accepted")
	}
}

func TestWriterRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	v, m := int64(4), int64(1)
	in := []Record{
		{Kind: KindInterval, T: 1, Job: "j", Thread: 0, Op: OpWrite, Dur: 1, MBs: 1.5, IOPS: 10, IOs: 10, Bytes: 1500000,
			Lat: Latency{Mean: 1, P50: 0.9, P99: 3, Max: 4}},
		{Kind: KindSummary, T: 1, Job: "j", Op: OpRead, Errors: 2, Verified: &v, Mismatches: &m},
	}
	for _, r := range in {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if buf.Len() != 0 {
		t.Error("Writer wrote before Flush")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	out, err := ReadRecords(&buf)
	if err != nil || len(out) != 2 {
		t.Fatalf("%v %v", out, err)
	}
	if !reflect.DeepEqual(out[0], in[0]) || *out[1].Verified != 4 || *out[1].Mismatches != 1 || out[1].Errors != 2 {
		t.Errorf("round trip changed records: %+v", out)
	}
}
