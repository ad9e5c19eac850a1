package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/sanqos/sanqos/internal/act/throttle"
)

// kernelHas is the feature probe of backend auto over check's kernel
// lines: a loadable module counts (its first use loads it), a line that
// says missing, failed or nothing at all does not. Run and check ask
// the same lines, so check says what run chooses.
func kernelHas(items []checkItem) throttle.FeatureProbe {
	byName := map[string]checkItem{}
	for _, it := range items {
		byName[it.Name] = it
	}
	return func(f string) error {
		it, ok := byName[f]
		switch {
		case !ok:
			return errors.New("not probed")
		case it.Status == stOK || it.Status == stModule:
			return nil
		case it.Status == stUnknown:
			return fmt.Errorf("nothing says it has it (%s)", it.Detail)
		}
		return errors.New(it.Detail)
	}
}

// edtKernelItems are the kernel lines of the edt backend's features on
// the host sys describes.
func edtKernelItems(sys checkSystem) []checkItem {
	k := readKernelInfo(sys)
	var items []checkItem
	for _, f := range kernelFeatures {
		if slices.Contains(throttle.EDTFeatures, f.name) {
			items = append(items, probeFeature(sys, k, f))
		}
	}
	return items
}

// resolveBackend resolves backend auto (throttle.ChooseBackend) on the
// kernel sys describes: o.backend gets the choice, o.asked "auto" and
// o.backendWhy the reason. Any other backend is left as asked.
func resolveBackend(o *runOptions, sys checkSystem) {
	if o.backend.Backend != throttle.Auto {
		return
	}
	c := throttle.ChooseBackend(o.backend, kernelHas(edtKernelItems(sys)))
	o.asked, o.backend.Backend, o.backendWhy = throttle.Auto, c.Backend, c.Reason
}

// openBackend opens o's backend and logs which and why. When auto chose
// edt and it would not start (the kernel lines said yes, the kernel
// said no), it opens nfqueue instead and o says so: auto never stops a
// daemon that nfqueue could run.
func openBackend(ctx context.Context, o *runOptions, log *slog.Logger) (throttle.Backend, error) {
	b, err := throttle.Open(ctx, o.backend)
	if err != nil && o.asked == throttle.Auto && o.backend.Backend == "edt" {
		log.Warn("the edt backend that auto chose would not start; starting nfqueue instead", "err", err)
		c := throttle.FellBack(err)
		o.backend.Backend, o.backendWhy = c.Backend, c.Reason
		b, err = throttle.Open(ctx, o.backend)
	}
	if err != nil {
		return nil, fmt.Errorf("starting the %s backend: %w", o.backend.Backend, err)
	}
	if o.backendWhy == "" {
		o.backendWhy = "as configured"
	}
	log.Info("data path", "backend", b.Name(), "why", o.backendWhy)
	return b, nil
}

// keepChoice gives o, read again by a reload, the running backend cur
// when both ask for auto: a reload reopens no data path, so auto's
// choice stands until a restart (and is no "backend changed").
func keepChoice(cur runOptions, o *runOptions) {
	if o.backend.Backend == throttle.Auto && cur.asked == throttle.Auto {
		o.asked, o.backend.Backend, o.backendWhy = cur.asked, cur.backend.Backend, cur.backendWhy
	}
}
