package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestPrometheusLive checks deploy/prometheus and deploy/grafana against
// the real thing: Debian's prometheus and promtool. promtool checks the
// rules and runs their unit tests; then a live 'sanqos run' (dry-run
// backend, a fixture diskstats that keeps a resource over its threshold
// with a writer throttled, two manual throttles, one SIGHUP reload) is
// scraped every second by a live Prometheus that loads the rules, and
// every query of every dashboard panel must return a series, the rules
// must load healthy, and the totals must move.
func TestPrometheusLive(t *testing.T) {
	if testing.Short() {
		t.Skip("a live test of about 15 s")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the manual throttles go through the daemon's root-only control socket")
	}
	promtool, err1 := exec.LookPath("promtool")
	prom, err2 := exec.LookPath("prometheus")
	if err1 != nil || err2 != nil {
		t.Skip("Debian's prometheus package (prometheus, promtool) is not installed: make deps installs it")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	rulesDir := filepath.Join(root, "deploy", "prometheus")
	rules := filepath.Join(rulesDir, "sanqos.rules.yml")

	t.Run("promtool", func(t *testing.T) {
		for _, args := range [][]string{{"check", "rules", rules}, {"test", "rules", "sanqos.rules.test.yml"}} {
			cmd := exec.Command(promtool, args...)
			cmd.Dir = rulesDir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	})

	dir := t.TempDir()
	bin := filepath.Join(dir, "sanqos")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sanqos")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sanqos: %v\n%s", err, out)
	}

	// The disk: loop1 (the reader's) reads at 40 ms, over the 15 ms
	// threshold, and at 20 ms while the daemon delays the writer (held,
	// from its /status): a plant where delay buys latency, or the loop
	// would rightly release a delay that buys nothing; loop2 writes at
	// about 100 MB/s, so the controller throttles its consumer.
	// Fixed-width numbers: each rewrite is one write of the same size,
	// which the daemon's kept descriptor re-reads.
	proc := filepath.Join(dir, "proc")
	if err := os.Mkdir(proc, 0o755); err != nil {
		t.Fatal(err)
	}
	ds := filepath.Join(proc, "diskstats")
	var reads, rticks, wsect uint64
	var held atomic.Bool
	render := func() []byte {
		return []byte(fmt.Sprintf("   7       1 loop1 %020d 0 %020d %020d 0 0 0 0 0 0 0 0 0 0 0 0 0\n"+
			"   7       2 loop2 0 0 0 0 %020d 0 %020d 0 0 0 0 0 0 0 0 0 0\n", reads, reads*16, rticks, wsect/8, wsect))
	}
	if err := os.WriteFile(ds, render(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(ds, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	diskCtx, stopDisk := context.WithCancel(context.Background())
	var diskDone sync.WaitGroup
	diskDone.Add(1)
	go func() {
		defer diskDone.Done()
		for {
			select {
			case <-diskCtx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			reads += 5
			rticks += 200
			if held.Load() {
				rticks -= 100
			}
			wsect += 4000
			f.WriteAt(render(), 0)
		}
	}()
	defer func() { stopDisk(); diskDone.Wait() }()

	// probe = "off": the fixture's devices are names only, and the
	// histogram must then be there with nothing in it.
	cfg := filepath.Join(dir, "sanqos.toml")
	if err := os.WriteFile(cfg, []byte("probe = \"off\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sanqosAddr := freeAddr(t)
	sock := filepath.Join(dir, "sanqos.sock")
	daemon := start(t, "sanqos", bin, "run", "--config", cfg, "--backend", "dry-run", "--threshold", "15ms",
		"--write-threshold", "1MB/s", "--write-leave", "500kB/s", "--listen", sanqosAddr, "--socket", sock, "--proc", proc,
		"--consumer", "fs-lab,10.99.0.2,loop1", "--consumer", "fs-lab,10.99.0.3,loop2")
	waitFor(t, daemon, 10*time.Second, func() bool {
		_, err := httpGet("http://" + sanqosAddr + "/metrics")
		return err == nil && fileExists(sock)
	})
	go func() {
		for diskCtx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			b, err := httpGet("http://" + sanqosAddr + "/status")
			var st struct {
				Resources []struct {
					DelayMs float64 `json:"delay_ms"`
				} `json:"resources"`
			}
			if err != nil || json.Unmarshal(b, &st) != nil || len(st.Resources) == 0 {
				continue
			}
			held.Store(st.Resources[0].DelayMs > 0)
		}
	}()
	for _, args := range [][]string{{"--ip", "10.99.0.4", "--delay", "5ms"}, {"--ip", "10.99.0.5", "--rate", "10MB/s"}} {
		cmd := exec.Command(bin, append([]string{"throttle", "--socket", sock}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("sanqos throttle %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if err := daemon.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}

	promAddr := freeAddr(t)
	promCfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(promCfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: sanqos
    static_configs:
      - targets: [%q]
`, rules, sanqosAddr)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", promCfg).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	p := start(t, "prometheus", prom, "--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	api := "http://" + promAddr + "/api/v1/"

	// A few scrapes: the rate() windows below (5 s) need two samples.
	waitFor(t, p, 30*time.Second, func() bool {
		r, err := query(api, `count_over_time(up{job="sanqos"}[1m]) >= 6 and up{job="sanqos"} == 1`)
		return err == nil && len(r) == 1
	})

	t.Run("panels", func(t *testing.T) {
		dash := loadDashboard(t, filepath.Join(root, "deploy", "grafana", "sanqos.json"))
		// What the dry-run backend cannot have: its queries must parse and
		// run, their series come from a kernel backend.
		needsKernel := map[string]string{
			"Client bytes on the wire": "wire counters need a kernel backend (iptables and ipset), not dry-run",
		}
		n := 0
		for _, pn := range dash.panels() {
			for _, tg := range pn.Targets {
				n++
				q := grafanaVars(tg.Expr)
				r, err := query(api, q)
				switch {
				case err != nil:
					t.Errorf("panel %q: %s: %v", pn.Title, q, err)
				case len(r) == 0 && needsKernel[pn.Title] != "":
					t.Logf("panel %q: no series, as expected: %s", pn.Title, needsKernel[pn.Title])
				case len(r) == 0:
					t.Errorf("panel %q: no series for %s", pn.Title, q)
				}
			}
		}
		if n < 20 {
			t.Errorf("only %d panel queries found in the dashboard", n)
		}
		// The template variables' label_values(SELECTOR, LABEL).
		lv := regexp.MustCompile(`^label_values\((.*), *(\w+)\)$`)
		for _, v := range dash.Templating.List {
			if v.Type != "query" {
				continue
			}
			m := lv.FindStringSubmatch(v.Definition)
			if m == nil {
				t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, v.Definition)
				continue
			}
			r, err := query(api, grafanaVars(m[1]))
			if err != nil || len(r) == 0 || r[0].Metric[m[2]] == "" {
				t.Errorf("variable %s: %s gives no %s: %v %v", v.Name, m[1], m[2], r, err)
			}
		}
	})

	t.Run("totals", func(t *testing.T) {
		for q, why := range map[string]string{
			`sanqos_config_reloads_total{result="success"} == 1`:                                "the SIGHUP reload is counted",
			`sanqos_config_last_reload_successful == 1`:                                         "the reload succeeded",
			`rate(sanqos_resource_reads_total{resource="fs-lab"}[5s]) > 0`:                      "reads are counted",
			`rate(sanqos_resource_over_threshold_seconds_total[5s]) > 0.5`:                      "the fixture keeps fs-lab over its threshold",
			`rate(sanqos_resource_throttled_seconds_total[5s]) > 0.5`:                           "the writer is throttled",
			`sanqos_manual_throttle_delay_seconds{addr="10.99.0.4",direction="write"} == 0.005`: "the manual delay",
			`sanqos_manual_read_rate_bytes_per_second{addr="10.99.0.5"} == 1e7`:                 "the manual rate cap",
			`sanqos_resource_read_duration_seconds_count == 0`:                                  "probe off: the histogram is there, empty",
		} {
			r, err := query(api, q)
			if err != nil || len(r) == 0 {
				t.Errorf("%s: %s (got %v, %v)", why, q, r, err)
			}
		}
	})

	t.Run("rules", func(t *testing.T) {
		b, err := httpGet(api + "rules")
		if err != nil {
			t.Fatal(err)
		}
		var resp struct {
			Status string
			Data   struct {
				Groups []struct {
					Name  string
					Rules []struct {
						Name, Health, LastError string
					}
				}
			}
		}
		if err := json.Unmarshal(b, &resp); err != nil || resp.Status != "success" {
			t.Fatalf("/api/v1/rules: %v %s", err, b)
		}
		src, _ := os.ReadFile(rules)
		want := len(regexp.MustCompile(`(?m)^\s+- (alert|record):`).FindAll(src, -1))
		got := 0
		for _, g := range resp.Data.Groups {
			for _, r := range g.Rules {
				got++
				// A rule not evaluated yet is "unknown"; after a few
				// seconds at a 1 s interval every one has run.
				if r.Health != "ok" {
					t.Errorf("rule %s/%s: health %q %s", g.Name, r.Name, r.Health, r.LastError)
				}
			}
		}
		if got != want || want == 0 {
			t.Errorf("Prometheus loaded %d rules, the file has %d", got, want)
		}
	})
}

// proc is a process the test started; stop ends it on every exit path.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

// start runs name's bin with args and registers its end with t.Cleanup:
// SIGTERM, then SIGKILL after 5 s.
func start(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, p.out.String())
		}
	})
	return p
}

// waitFor polls ok until it holds, failing when p exits or after d.
func waitFor(t *testing.T, p *proc, d time.Duration, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("%s exited: %v\n%s", p.name, err, p.out.String())
		default:
		}
		if ok() {
			return
		}
	}
	t.Fatalf("waiting for %s: gave up after %v\n%s", p.name, d, p.out.String())
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func httpGet(u string) ([]byte, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, b)
	}
	return b, err
}

type series struct {
	Metric map[string]string
	Value  []any
}

// query runs an instant query; the error says why Prometheus refused it.
func query(api, q string) ([]series, error) {
	b, err := httpGet(api + "query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	var resp struct {
		Status, Error string
		Data          struct {
			ResultType string
			Result     json.RawMessage
		}
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		return nil, err
	}
	if resp.Status != "success" {
		return nil, fmt.Errorf("%s", resp.Error)
	}
	if resp.Data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want vector", resp.Data.ResultType)
	}
	var r []series
	return r, json.Unmarshal(resp.Data.Result, &r)
}

// grafanaVars gives a panel's query what Grafana would: every instance
// and resource, a rate window of a few scrapes, a range of a minute.
func grafanaVars(q string) string {
	return strings.NewReplacer("$__rate_interval", "5s", "$__range", "1m", "$instance", ".+", "$resource", ".+").Replace(q)
}

type dashboard struct {
	Panels     []panel
	Templating struct {
		List []struct {
			Name, Type, Definition string
		}
	}
}

type panel struct {
	Title   string
	Type    string
	Targets []struct{ Expr string }
	Panels  []panel // a collapsed row's
}

func loadDashboard(t *testing.T, path string) dashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

// panels lists every panel with queries, rows' included.
func (d dashboard) panels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if len(p.Targets) > 0 {
				out = append(out, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}
