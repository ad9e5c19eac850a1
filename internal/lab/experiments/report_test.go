package experiments

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReportOfARealRun renders the summary of a real fig5.11 --short run:
// the checks recomputed from its runs are the ones it recorded, and the
// page has a row per run, a verdict per check and every plot.
func TestReportOfARealRun(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "fig511-short-summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if got := checks(&s); !reflect.DeepEqual(got, s.Checks) {
		t.Errorf("checks recomputed from the runs:\n%+v\nrecorded:\n%+v", got, s.Checks)
	}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := WriteHTML(path, &s, rebase(`<section><img src="compare.png"></section>`, "sim")); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	for _, r := range s.Runs {
		if !strings.Contains(html, "<tr><td>"+r.Name+"</td>") {
			t.Errorf("no table row for run %s", r.Name)
		}
	}
	for _, p := range s.Plots {
		if !strings.Contains(html, `<img src="`+p+`"`) {
			t.Errorf("plot %s not on the page", p)
		}
	}
	verdicts := strings.Count(html, `class="ok">met`) + strings.Count(html, `class="bad">missed`)
	if verdicts != len(s.Checks) {
		t.Errorf("%d verdicts on the page, %d checks", verdicts, len(s.Checks))
	}
	if !strings.Contains(html, `<img src="sim/compare.png">`) {
		t.Error("the sim section is missing or its links were not made relative to the page")
	}
	if !strings.Contains(html, "MTU 1500") || !strings.Contains(html, "GRO true") {
		t.Error("the lab's MTU and offloads are not on the page")
	}

	// A run with its own u_max says so.
	s.Runs[1].UMaxMs = 60
	if err := WriteHTML(path, &s, ""); err != nil {
		t.Fatal(err)
	}
	if page, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	if want := "(" + s.Runs[1].Name + ": u_max 60 ms)"; !strings.Contains(string(page), want) {
		t.Errorf("the page does not say %q", want)
	}
	if strings.Contains(string(page), "<h2>Bursts</h2>") {
		t.Error("a summary without burst analysis has a Bursts section")
	}

	// A run with burst analysis gets its row, a burst that never settled
	// says so.
	bs := analyzeBursts(synth([]float64{8, 50, 30, 8, 8, 8, 60, 60}, ".###..##"), 18)
	s.Runs[1].Bursts = &bs
	s.Runs[1].Guarantees = &Guarantees{BurstJain: []float64{0.97, 0.95}, MinJain: 0.95, WriteCV: 0.25, CVSeconds: 40}
	if err := WriteHTML(path, &s, ""); err != nil {
		t.Fatal(err)
	}
	if page, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<h2>Bursts</h2>", "1: 50, 2, 2.0;", "6: 60, 2, never (cut by the run's end);", "<h2>Guarantees</h2>", "0.950 (2)", "0.25 (40)"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page does not say %q", want)
		}
	}
}
