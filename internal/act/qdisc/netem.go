package qdisc

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/decide/direction"
)

// Qdisc handles (hex majors) of the tc backends, one each so that a
// leftover is recognised by its handle: 0x53 is "S" for sanqos, 0x54 the
// next one.
const (
	NetemHandle = 0x53
	HTBHandle   = 0x54
	// classBase is the first class minor of a leaf; minor 1 is the default
	// (unthrottled) class.
	classBase = 0x10
	// netemLeafBase is the handle major of the first netem leaf qdisc:
	// above both root handles, so leaves never collide with a root.
	netemLeafBase = 0x100
	// lineRate is the HTB rate of every class that must not limit
	// bandwidth: far above what the links here carry.
	lineRate = "10gbit"
)

// DefaultNetemSteps are the fixed delays of the netem leaves: 0.1 ms, then
// 0.5 ms to 20 ms by 0.5 ms, the thesis's controller range and step.
func DefaultNetemSteps() []time.Duration {
	s := []time.Duration{100 * time.Microsecond}
	for d := 500 * time.Microsecond; d <= 20*time.Millisecond; d += 500 * time.Microsecond {
		s = append(s, d)
	}
	return s
}

// TCConfig configures the tc-based backends (netem, htb).
type TCConfig struct {
	// Dev is the interface the target reaches its initiators through.
	Dev          string
	Instance     string          // see throttle.Options.Instance; "" names it after Dev
	Steps        []time.Duration // netem delays; DefaultNetemSteps when empty
	SmallSegment int
	// SmallSegments overrides SmallSegment per target port: the rules
	// classify each split's ports apart (see plan.SplitGroups).
	SmallSegments map[uint16]int
	Run           owned.Runner   // default: ExecRunner
	Firewall      owned.Firewall // default: iptables through Run
	Sets          owned.Sets     // default: ipsets over netlink
	Logger        *slog.Logger
	// IdleGrace is how long the qdiscs stay after the last throttle
	// ended; 0 is DefaultIdleGrace.
	IdleGrace time.Duration
}

func (c *TCConfig) defaults(backend string) error {
	if c.Dev == "" {
		return fmt.Errorf("the %s backend needs the interface the target reaches its initiators on (--dev)", backend)
	}
	if len(c.Steps) == 0 {
		c.Steps = DefaultNetemSteps()
	}
	if c.SmallSegment == 0 {
		c.SmallSegment = plan.DefaultSmallSegment
	}
	if err := plan.ValidateSmallSegments(c.SmallSegments); err != nil {
		return err
	}
	if c.Run == nil {
		c.Run = owned.ExecRunner{}
	}
	if c.Firewall == nil {
		c.Firewall = &owned.Iptables{Run: c.Run}
	}
	if c.Sets == nil {
		c.Sets = owned.Ipsets{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// dirMatch is the iptables length match selecting one direction.
func dirMatch(d direction.Direction, small int) string {
	if d == direction.Write {
		return fmt.Sprintf("-m length --length 0:%d", plan.LengthSplit(small))
	}
	return fmt.Sprintf("-m length --length %d:65535", plan.LengthSplit(small)+1)
}

// classID renders a class as iptables-save prints CLASSIFY targets.
func classID(major, minor int) string { return fmt.Sprintf("%04x:%04x", major, minor) }

// RemoveRootQdisc deletes dev's root qdisc if it carries our handle.
func RemoveRootQdisc(ctx context.Context, run owned.Runner, dev string, major int) error {
	out, err := run.Run(ctx, "", "tc", "qdisc", "show", "dev", dev, "root")
	if err != nil {
		return fmt.Errorf("reading the qdisc of %s: %w", dev, err)
	}
	if !strings.Contains(out, fmt.Sprintf(" %x: root", major)) {
		return nil
	}
	if _, err := run.Run(ctx, "", "tc", "qdisc", "del", "dev", dev, "root", "handle", fmt.Sprintf("%x:", major)); err != nil {
		return fmt.Errorf("removing the sanqos qdisc of %s: %w", dev, err)
	}
	return nil
}

// Netem is the thesis's kernel data path: an HTB root on Dev with one
// netem leaf per fixed delay; iptables CLASSIFY sends each group's packets
// to the leaf nearest its requested delay (cls_fw, the thesis's mark
// filter, is missing on many kernels; CLASSIFY needs no filter). Netem
// does not keep a flow's order when its delay drops; nfqueue does.
type Netem struct{ tcRoot }

// NewNetem removes leftovers and builds the qdisc tree. On a kernel
// without sch_netem it leaves the device as it was and says to use nfqueue.
func NewNetem(ctx context.Context, cfg TCConfig) (*Netem, error) {
	if err := cfg.defaults("netem"); err != nil {
		return nil, err
	}
	b := &Netem{newTCRoot(cfg, "netem", NetemHandle)}
	h := fmt.Sprintf("%x:", NetemHandle)
	var leaves [][]string
	for i, d := range cfg.Steps {
		cls := fmt.Sprintf("%x:%x", NetemHandle, classBase+i)
		leaves = append(leaves,
			[]string{"class", "add", "dev", cfg.Dev, "parent", h, "classid", cls, "htb", "rate", lineRate},
			[]string{"qdisc", "add", "dev", cfg.Dev, "parent", cls, "handle", fmt.Sprintf("%x:", netemLeafBase+i), "netem", "delay", fmtDelay(d)},
		)
	}
	if failed, out, err := b.build(ctx, leaves); err != nil {
		if slices.Contains(failed, "netem") && strings.Contains(out+err.Error(), "unknown") {
			return nil, fmt.Errorf("this kernel has no sch_netem, so the netem backend cannot run here; use --backend nfqueue")
		}
		return nil, fmt.Errorf("building the netem qdiscs on %s: %w", cfg.Dev, err)
	}
	return b, nil
}

// fmtDelay prints a delay for tc in microseconds, which tc parses exactly.
func fmtDelay(d time.Duration) string { return fmt.Sprintf("%dus", d.Microseconds()) }

// Quantize returns the index of the step nearest d, or -1 when d is closer
// to zero than to the first step.
func Quantize(steps []time.Duration, d time.Duration) int {
	best, bestErr := -1, math.Abs(float64(d))
	for i, s := range steps {
		if e := math.Abs(float64(d - s)); e < bestErr {
			best, bestErr = i, e
		}
	}
	return best
}

func (b *Netem) Name() string { return "netem" }

// Rules classifies each active group's packets, per direction, into the
// leaf nearest the requested delay.
func (b *Netem) Rules(s plan.State) []string {
	var out []string
	for _, g := range plan.SortedGroups(s) {
		for _, dir := range []direction.Direction{direction.Write, direction.Read} {
			d := g.WriteDelay
			if dir == direction.Read {
				d = g.ReadDelay
			}
			i := Quantize(b.cfg.Steps, d)
			if i < 0 {
				continue
			}
			for _, pg := range plan.SplitGroups(g.TargetPorts(), b.cfg.SmallSegments, b.cfg.SmallSegment) {
				out = append(out, fmt.Sprintf("-A %s %s -m set --match-set %s dst %s -j CLASSIFY --set-class %s",
					owned.Chain, plan.PortMatch(pg.Ports), plan.SetName(g.Name), dirMatch(dir, pg.Small), classID(NetemHandle, classBase+i)))
			}
		}
	}
	return out
}

func (b *Netem) Apply(ctx context.Context, s plan.State) error {
	if err := plan.ValidateShape(s); err != nil {
		return err
	}
	// What cannot be programmed (an IPv6 member) is left out and
	// reported; the rest is applied.
	s, refused := plan.Split(s)
	if err := b.lock(); err != nil {
		return err
	}
	defer b.mu.Unlock()
	rules := b.Rules(s)
	if len(rules) > 0 {
		if err := b.ensure(ctx); err != nil {
			return err
		}
	}
	if err := b.rec.Apply(ctx, rules, plan.WantSets(s)); err != nil {
		return fmt.Errorf("programming the netem data path: %w", err)
	}
	if len(rules) == 0 {
		b.idle(nil)
	}
	if refused != nil {
		return refused
	}
	return nil
}
