//go:build !linux

package qdisc

import (
	"context"
	"errors"
)

// OpenEDT fails: the edt path needs Linux.
func OpenEDT(context.Context, EDTConfig) (*EDT, error) {
	return nil, errors.New("the edt backend (tc/BPF departure times with fq) exists on Linux only")
}
