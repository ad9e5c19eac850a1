package sim

import (
	"bytes"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAblation prints the ablation table of docs/ablation.md:
//
//	SANQOS_SIM_ABLATE=1 go test ./internal/sim -run TestAblation -v -timeout 1h
//
// (SANQOS_SIM_ABLATE=N: N seeds, 1…N; 1 means 5;
// SANQOS_SIM_ABLATE_ONLY=−a,−b runs only those variants beside the full
// law; SANQOS_SIM_ABLATE_OFF=a,b adds one with those rules off
// together). Without it, one case
// under the full law and with armed pauses off checks that the harness
// runs and that a switched rule reaches the runs.
func TestAblation(t *testing.T) {
	cases, err := AblationCases()
	if err != nil {
		t.Fatal(err)
	}
	variants, seeds := AblationVariants(), []int64{1, 2, 3, 4, 5}
	env := os.Getenv("SANQOS_SIM_ABLATE")
	if n, err := strconv.Atoi(env); err == nil && n > 1 {
		seeds = seeds[:0]
		for s := range n {
			seeds = append(seeds, int64(s+1))
		}
	}
	if only := os.Getenv("SANQOS_SIM_ABLATE_ONLY"); only != "" {
		// Variants by name, e.g. −armed,−rest: for a rerun.
		keep := variants[:1]
		for _, v := range variants[1:] {
			if slices.Contains(strings.Split(only, ","), v.Name) {
				keep = append(keep, v)
			}
		}
		variants = keep
	}
	if off := os.Getenv("SANQOS_SIM_ABLATE_OFF"); off != "" {
		// Rules off together, e.g. first-climb,far-raise: one variant more.
		rules := strings.Split(off, ",")
		variants = append(variants, AblationVariant{Name: "−" + strings.Join(rules, " −"), Off: rules})
	}
	if env == "" {
		seeds = []int64{1}
		variants = []AblationVariant{variants[0], {Name: "−armed", Off: []string{"armed"}}}
		for _, c := range cases {
			if c.Name == "lab-15" {
				c.Duration = 60 * time.Second
				cases = []AblationCase{c}
				break
			}
		}
	}
	start := time.Now()
	tab, err := Ablate(variants, cases, seeds, func(v AblationVariant) {
		t.Logf("%s done after %v", v.Name, time.Since(start).Round(time.Second))
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tab.Markdown(&out)
	t.Logf("ablation (%d variants, %d cases, %d seeds) in %v:\n%s", len(variants), len(cases), len(seeds),
		time.Since(start).Round(time.Second), out.String())
	full := tab.M[0][0][0]
	if !(full.P95OverT > 0) || !(full.WriteMBs > 0) {
		t.Errorf("full law on %s: %+v, want a reader's p95 and writers' rate", cases[0].Name, full)
	}
	if env == "" {
		if _, identical := tab.Effect(1, 0); identical {
			t.Errorf("armed off ran identically to the full law on %s", cases[0].Name)
		}
		if !strings.Contains(out.String(), "| lab-15 |") {
			t.Errorf("the table has no row for lab-15:\n%s", out.String())
		}
	}
}

// TestSettleS: a burst's settle time is from its onset to the end of its
// last second over the limit, a burst over at its end counts its length,
// and a gap of writing under 2 s does not split a burst.
func TestSettleS(t *testing.T) {
	nan := math.NaN()
	sec := func(on bool, ms float64) Second { return Second{WritersOn: on, ReadMs: ms} }
	for _, tc := range []struct {
		name string
		secs []Second
		want float64
	}{
		{"never over", []Second{sec(false, 5), sec(true, 10), sec(true, 11)}, 0},
		{"settles after 2 s", []Second{sec(false, 5), sec(true, 30), sec(true, 20), sec(true, 10), sec(true, 10)}, 2},
		{"a second without reads is over", []Second{sec(true, nan), sec(true, 10)}, 1},
		{"over at its end", []Second{sec(true, 10), sec(true, 30), sec(false, 5)}, 2},
		{"two bursts averaged", []Second{sec(true, 30), sec(true, 10), sec(false, 5), sec(false, 5), sec(false, 5), sec(true, 10), sec(true, 10)}, 0.5},
		{"a short gap is one burst", []Second{sec(true, 10), sec(false, 5), sec(true, 30), sec(true, 10)}, 3},
		{"no writers", []Second{sec(false, 30)}, 0},
	} {
		if got := settleS(tc.secs, 18); got != tc.want {
			t.Errorf("%s: settle %v s, want %v", tc.name, got, tc.want)
		}
	}
}
