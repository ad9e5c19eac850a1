package throttle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sanqos/sanqos/internal/throttle/edt"
)

// edtKernel is package edt's path behind the edtPath interface.
type edtKernel struct{ e *edt.EDT }

func (k edtKernel) Set(key edtKey, split int, dir Direction, delay, ttl time.Duration) error {
	d := edt.Write
	switch dir {
	case Read:
		d = edt.Read
	case Both:
		d = edt.Both
	}
	return k.e.Set(key.addr, key.port, split, d, delay, ttl)
}

func (k edtKernel) Free(key edtKey) error { return k.e.Free(key.addr, key.port) }

func (k edtKernel) Totals() (uint64, uint64, error) {
	t, err := k.e.Totals()
	return t.Delayed, t.Passed, err
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
	if err := CheckInstance(inst); err != nil {
		return nil, err
	}
	lk, err := lockInstance(0, inst)
	if err != nil {
		return nil, fmt.Errorf("%w; stop it first", err)
	}
	e, err := edt.New("", o.Dev)
	if err != nil {
		lk.release()
		return nil, fmt.Errorf("%w (the edt backend needs sch_fq, clsact and BPF: a distribution kernel has them; use nfqueue elsewhere)", err)
	}
	b := newEDT(edtKernel{e}, DefaultEDTTTL, o.Logger)
	b.small = o.SmallSegments
	if o.SmallSegment > 0 {
		b.smallDef = o.SmallSegment
	}
	b.ilock = lk
	return b, nil
}
