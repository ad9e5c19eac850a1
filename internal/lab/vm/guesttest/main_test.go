package guesttest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/vm/kstack"
)

// The stack is built once per guest run, on first use, and removed when
// the tests end: building it under emulation takes tens of seconds.
var (
	stackOnce sync.Once
	theStack  *kstack.Stack
	stackErr  error
	// disks[i] are initiator i's SCSI disks, by LUN.
	disks = map[string][]string{}
)

func stack(t *testing.T) *kstack.Stack {
	t.Helper()
	inGuest(t)
	stackOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		theStack, stackErr = kstack.Build(ctx, kstack.Options{Initiators: 2, DelayMs: 5,
			Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
		if stackErr != nil {
			return
		}
		for _, in := range theStack.Initiators {
			d, err := theStack.Login(ctx, in)
			if err != nil {
				stackErr = err
				return
			}
			disks[in.Name] = d
		}
		fmt.Fprintf(os.Stderr, "kstack: built and logged in (%v, guest clock): %v\n", time.Since(start).Round(time.Millisecond), disks)
	})
	if stackErr != nil {
		t.Fatalf("building the kernel stack: %v", stackErr)
	}
	return theStack
}

// diskOf returns the initiator's disk that serves the portal group's LUN
// lun (an index of Stack.LUNs).
func diskOf(t *testing.T, s *kstack.Stack, in kstack.Initiator, lun int) string {
	t.Helper()
	for m, l := range s.LUNsOf(in) {
		if l == lun {
			return disks[in.Name][m]
		}
	}
	t.Fatalf("%s has no LUN %d mapped", in.Name, lun)
	return ""
}

func TestMain(m *testing.M) {
	rc := m.Run()
	if theStack != nil {
		if err := theStack.Close(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "removing the kernel stack: %v\n", err)
			rc = 1
		}
	}
	os.Exit(rc)
}
