package nfqbackend

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
)

// reserveProc gives the Go scheduler one P (the right to run Go code)
// more than before, for as long as a packet thread runs; release gives it
// back. The packet thread keeps its P even while it waits (see
// yieldEvery), so without one more the daemon's ordinary goroutines, and
// a garbage collection, would have a CPU's worth less than the machine
// has.
var procs struct {
	sync.Mutex
	base, threads int
}

func reserveProc() (release func()) {
	procs.Lock()
	defer procs.Unlock()
	if procs.threads == 0 {
		procs.base = runtime.GOMAXPROCS(0)
	}
	procs.threads++
	runtime.GOMAXPROCS(procs.base + procs.threads)
	return func() {
		procs.Lock()
		defer procs.Unlock()
		procs.threads--
		runtime.GOMAXPROCS(procs.base + procs.threads)
	}
}

// processThreads lists the thread ids of this process.
func processThreads() ([]int, error) { return threadsUnder("/proc") }

// threadsUnder lists the thread ids of this process from the /proc root
// proc.
func threadsUnder(proc string) ([]int, error) {
	tasks, err := os.ReadDir(filepath.Join(proc, "self", "task"))
	if err != nil {
		return nil, fmt.Errorf("listing this process's threads: %w", err)
	}
	var tids []int
	for _, e := range tasks {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
