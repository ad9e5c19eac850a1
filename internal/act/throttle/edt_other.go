//go:build !linux

package throttle

import (
	"context"
	"errors"
)

func openEDT(context.Context, Options) (*EDT, error) {
	return nil, errors.New("the edt backend (tc/BPF departure times with fq) exists on Linux only")
}
