package throttle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/throttle/edt"
)

// edtKernel is package edt's path behind the edtPath interface.
type edtKernel struct{ e *edt.EDT }

func (k edtKernel) Set(key edtKey, e edtEntry, ttl time.Duration) error {
	d := edt.Write
	switch e.dir {
	case Read:
		d = edt.Read
	case Both:
		d = edt.Both
	}
	en := edt.Entry{Split: e.split, Dir: d, Delay: e.delay, Armed: e.armed, Rise: edtRise(e.rise)}
	return k.e.SetEntry(key.addr, key.port, en, ttl)
}

// edtRise is r in the program's integers: the factor per mille.
func edtRise(r RiseLimit) edt.Rise {
	return edt.Rise{Permille: uint64(math.Round(max(r.Factor, 0) * 1000)), Step: r.Step}
}

func (k edtKernel) Free(key edtKey) error { return k.e.Free(key.addr, key.port) }

func (k edtKernel) Totals() (edtTotals, error) {
	t, err := k.e.Totals()
	return edtTotals{held: t.Delayed, passed: t.Passed, limited: t.Limited}, err
}
func (k edtKernel) Attach() error { return k.e.Attach() }
func (k edtKernel) Detach() error { return k.e.Detach() }
func (k edtKernel) Close() error  { return k.e.Close() }

func (k edtKernel) Verify(force bool) ([]Drift, error) {
	ds, err := k.e.Verify(force)
	out := make([]Drift, len(ds))
	for i, d := range ds {
		out[i] = Drift{Object: d.Object, Name: d.Name, Want: d.Want, Found: d.Found}
	}
	return out, err
}

// openEDT installs the edt path on o.Dev in this network namespace, after
// removing what an earlier run left; the device's instance lock keeps a
// second tc-style backend off it.
func openEDT(_ context.Context, o Options) (*EDT, error) {
	if o.Dev == "" {
		return nil, errors.New("the edt backend needs the interface the target reaches its initiators on (--dev)")
	}
	inst := o.Instance
	if inst == "" {
		inst = DefaultInstance(Options{Backend: "edt", Dev: o.Dev})
	}
	if err := owned.CheckInstance(inst); err != nil {
		return nil, err
	}
	lk, err := owned.LockInstance(0, inst)
	if err != nil {
		return nil, fmt.Errorf("%w; stop it first", err)
	}
	e, err := edt.New("", o.Dev)
	if err != nil {
		lk.Release()
		return nil, fmt.Errorf("%w (the edt backend needs sch_fq, clsact and BPF: a distribution kernel has them; use nfqueue elsewhere)", err)
	}
	b := newEDT(edtKernel{e}, DefaultEDTTTL, o.Logger)
	b.small = o.SmallSegments
	if o.SmallSegment > 0 {
		b.smallDef = o.SmallSegment
	}
	b.ilock = lk
	b.linger = riseKeep
	return b, nil
}
