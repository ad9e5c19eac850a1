package diskstats

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fixtureFS returns a reader of testdata/<name> by copying it into a fake
// proc root, so NewFS is exercised exactly as on a live system.
func fixtureFS(t *testing.T, name string) *FS {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "diskstats"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return NewFS(root)
}

func find(stats []Stat, dev string) *Stat {
	for i := range stats {
		if stats[i].Device == dev {
			return &stats[i]
		}
	}
	return nil
}

func TestReadFixtures(t *testing.T) {
	tests := []struct {
		file    string
		devices int
		dev     string
		want    Stat
	}{
		{
			file: "diskstats.host", devices: 10, dev: "vda",
			want: Stat{Major: 254, Minor: 0, Device: "vda", Fields: 20,
				ReadIOs: 39766, ReadMerges: 7843, ReadSectors: 2281250, ReadTicks: 11357,
				WriteIOs: 11566, WriteMerges: 16315, WriteSectors: 1246856, WriteTicks: 4639,
				InProgress: 0, IOTicks: 7092, WeightedIOTicks: 16359,
				DiscardIOs: 4347, DiscardMerges: 38, DiscardSectors: 240896, DiscardTicks: 309,
				FlushIOs: 1386, FlushTicks: 54},
		},
		{
			file: "diskstats.k4_18", devices: 3, dev: "dm-0",
			want: Stat{Major: 253, Minor: 0, Device: "dm-0", Fields: 14,
				ReadIOs: 912, ReadSectors: 7296, ReadTicks: 5120,
				WriteIOs: 4000, WriteSectors: 320000, WriteTicks: 88000,
				InProgress: 2, IOTicks: 4100, WeightedIOTicks: 93120},
		},
		{
			file: "diskstats.k5_x", devices: 2, dev: "sdb",
			want: Stat{Major: 8, Minor: 16, Device: "sdb", Fields: 18,
				ReadIOs: 4294967290, ReadSectors: 100, ReadTicks: 2000,
				WriteIOs: 18446744073709551610, WriteSectors: 800, WriteTicks: 3000,
				IOTicks: 500, WeightedIOTicks: 5000,
				DiscardIOs: 7, DiscardSectors: 56, DiscardTicks: 9},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			stats, bad, err := fixtureFS(t, tt.file).Read()
			if err != nil {
				t.Fatal(err)
			}
			if len(bad) != 0 {
				t.Fatalf("unexpected malformed lines: %v", bad)
			}
			if len(stats) != tt.devices {
				t.Fatalf("got %d devices, want %d", len(stats), tt.devices)
			}
			got := find(stats, tt.dev)
			if got == nil {
				t.Fatalf("device %s missing", tt.dev)
			}
			if *got != tt.want {
				t.Errorf("%s:\n got %+v\nwant %+v", tt.dev, *got, tt.want)
			}
		})
	}
}

func TestMalformedLinesAreSkippedWithLineNumbers(t *testing.T) {
	stats, bad, err := fixtureFS(t, "diskstats.malformed").Read()
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for _, s := range stats {
		devs = append(devs, s.Device)
	}
	if got := strings.Join(devs, ","); got != "sda,sda5" {
		t.Errorf("parsed devices %q, want sda,sda5", got)
	}
	wantLines := []int{3, 4, 5, 6, 7}
	if len(bad) != len(wantLines) {
		t.Fatalf("got %d malformed lines %v, want lines %v", len(bad), bad, wantLines)
	}
	for i, b := range bad {
		if b.Line != wantLines[i] {
			t.Errorf("malformed #%d at line %d, want %d (%v)", i, b.Line, wantLines[i], b)
		}
		if !strings.Contains(b.Error(), "line ") {
			t.Errorf("error %q does not name the line", b.Error())
		}
	}
}

func TestParseTable(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		fields []int // Fields of each parsed line
		bad    int
	}{
		{"empty", "", nil, 0},
		{"blank lines", "\n  \n\t\n", nil, 0},
		{"no trailing newline", "8 0 sda 1 2 3 4 5 6 7 8 9 10 11", []int{14}, 0},
		{"crlf", "8 0 sda 1 2 3 4 5 6 7 8 9 10 11\r\n", []int{14}, 0},
		{"tabs", "8\t0\tsda\t1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n", []int{20}, 0},
		{"old 2.6 partition line (7 fields)", "8 1 sda1 1 2 3 4\n", nil, 1},
		{"negative", "8 0 sda -1 2 3 4 5 6 7 8 9 10 11\n", nil, 1},
		{"uint64 overflow", "8 0 sda 18446744073709551616 2 3 4 5 6 7 8 9 10 11\n", nil, 1},
		{"uint64 max", "8 0 sda 18446744073709551615 2 3 4 5 6 7 8 9 10 11\n", []int{14}, 0},
		{"mixed", "8 0 a 1 2 3 4 5 6 7 8 9 10 11\nx\n8 0 b 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n", []int{14, 18}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stats, bad, err := parse(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(bad) != tt.bad {
				t.Errorf("malformed = %v, want %d", bad, tt.bad)
			}
			if len(stats) != len(tt.fields) {
				t.Fatalf("parsed %d lines, want %d", len(stats), len(tt.fields))
			}
			for i, s := range stats {
				if s.Fields != tt.fields[i] {
					t.Errorf("line %d: Fields = %d, want %d", i, s.Fields, tt.fields[i])
				}
			}
		})
	}
}

func TestReadMissingFile(t *testing.T) {
	_, _, err := NewFS(t.TempDir()).Read()
	if err == nil || !strings.Contains(err.Error(), "diskstats") {
		t.Fatalf("err = %v, want an error naming the file", err)
	}
}

func TestReadLargerThanBuffer(t *testing.T) {
	// More than the initial 64 KiB buffer: the reader must not trust a
	// single read or the stat size.
	var b strings.Builder
	for i := 0; i < 2000; i++ {
		b.WriteString("   8       0 sdxyz 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n")
	}
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "diskstats"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := NewFS(root)
	var buf []Stat
	for round := 0; round < 2; round++ {
		stats, bad, err := fs.ReadInto(buf)
		if err != nil || len(bad) != 0 {
			t.Fatal(err, bad)
		}
		if len(stats) != 2000 {
			t.Fatalf("round %d: %d devices, want 2000", round, len(stats))
		}
		buf = stats
	}
}

func TestCounterWrap(t *testing.T) {
	tests := []struct {
		name       string
		cur, prev  uint64
		want       uint64
		wantWrap32 bool
	}{
		{"no change", 5, 5, 0, false},
		{"growth", 10, 3, 7, false},
		{"32-bit wrap", 4, 1<<32 - 6, 10, true},
		{"32-bit wrap at max", 0, 1<<32 - 1, 1, true},
		// A 64-bit counter never wraps: going back from above 2^32 is a
		// reset, which counts nothing (delta_reset_test.go).
		{"64-bit counter going back", 4, 1<<64 - 6, 0, false},
		{"back from above 2^32", 1, 1 << 33, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Counter(tt.cur, tt.prev); got != tt.want {
				t.Errorf("Counter(%d, %d) = %d, want %d", tt.cur, tt.prev, got, tt.want)
			}
		})
	}
}

func TestRates(t *testing.T) {
	prev := Stat{ReadIOs: 100, ReadSectors: 1000, ReadTicks: 500, WriteIOs: 10, WriteSectors: 2000, WriteTicks: 40}
	cur := Stat{ReadIOs: 120, ReadSectors: 1400, ReadTicks: 800, WriteIOs: 30, WriteSectors: 4000, WriteTicks: 140}
	r := Sub(&cur, &prev).Rates(200 * time.Millisecond)
	want := Rates{Reads: 20, ReadMs: 300, RAwaitMs: 15, Writes: 20, WriteMs: 100, WAwaitMs: 5,
		WriteSectorsPerSecond: 10000, ReadKBs: 1000, WriteKBs: 5000}
	if r != want {
		t.Errorf("rates\n got %+v\nwant %+v", r, want)
	}
	idle := Sub(&cur, &cur).Rates(100 * time.Millisecond)
	if idle != (Rates{}) {
		t.Errorf("idle device rates = %+v, want zero", idle)
	}
	if z := Sub(&cur, &prev).Rates(0); z.ReadKBs != 0 || z.RAwaitMs != 15 {
		t.Errorf("zero elapsed: %+v, want zero rates but await 15", z)
	}
}

func TestRatesAcrossWrap(t *testing.T) {
	prev := Stat{ReadIOs: 1<<32 - 2, ReadTicks: 1<<32 - 10}
	cur := Stat{ReadIOs: 3, ReadTicks: 40}
	r := Sub(&cur, &prev).Rates(100 * time.Millisecond)
	if r.Reads != 5 || r.ReadMs != 50 || r.RAwaitMs != 10 {
		t.Errorf("across wrap: %+v, want 5 reads, 50 ms, await 10", r)
	}
}

func TestParserInternsNames(t *testing.T) {
	data := []byte("8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n")
	var p Parser
	dst := make([]Stat, 0, 4)
	dst, _ = p.Parse(dst, data)
	allocs := testing.AllocsPerRun(100, func() {
		dst, _ = p.Parse(dst[:0], data)
	})
	if allocs != 0 {
		t.Errorf("re-parsing known devices allocates %.1f times, want 0", allocs)
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"diskstats.host", "diskstats.k4_18", "diskstats.k5_x", "diskstats.malformed"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("8 0 sda 99999999999999999999999 2\n\n\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Parser
		stats, bad := p.Parse(nil, data)
		lines := strings.Count(string(data), "\n") + 1
		if len(stats)+len(bad) > lines {
			t.Fatalf("%d stats + %d errors from %d lines", len(stats), len(bad), lines)
		}
		for _, s := range stats {
			if s.Fields != 14 && s.Fields != 18 && s.Fields != 20 {
				t.Fatalf("accepted a line with %d fields", s.Fields)
			}
		}
		// Differential check against the obvious strconv parser.
		var want []Stat
		for _, l := range strings.Split(string(data), "\n") {
			if s, ok := slowParse(l); ok {
				want = append(want, s)
			}
		}
		if len(want) != len(stats) {
			t.Fatalf("parsed %d lines, strconv parser %d", len(stats), len(want))
		}
		for i := range want {
			if want[i] != stats[i] {
				t.Fatalf("line %d:\n got %+v\nwant %+v", i, stats[i], want[i])
			}
		}
		for _, b := range bad {
			if b.Line < 1 || b.Line > lines {
				t.Fatalf("error at line %d of %d", b.Line, lines)
			}
		}
	})
}

// slowParse is the reference parser of FuzzParse.
func slowParse(l string) (Stat, bool) {
	f := strings.FieldsFunc(l, func(r rune) bool { return r == ' ' || r == '\t' || r == '\r' })
	if len(f) != 14 && len(f) != 18 && len(f) != 20 {
		return Stat{}, false
	}
	var n [20]uint64
	for i, x := range f {
		if i == 2 {
			continue
		}
		if x[0] == '+' || x[0] == '-' {
			return Stat{}, false
		}
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil || (i < 2 && v > 1<<32-1) {
			return Stat{}, false
		}
		n[i] = v
	}
	return Stat{Major: uint32(n[0]), Minor: uint32(n[1]), Device: f[2], Fields: len(f),
		ReadIOs: n[3], ReadMerges: n[4], ReadSectors: n[5], ReadTicks: n[6],
		WriteIOs: n[7], WriteMerges: n[8], WriteSectors: n[9], WriteTicks: n[10],
		InProgress: n[11], IOTicks: n[12], WeightedIOTicks: n[13],
		DiscardIOs: n[14], DiscardMerges: n[15], DiscardSectors: n[16], DiscardTicks: n[17],
		FlushIOs: n[18], FlushTicks: n[19]}, true
}
