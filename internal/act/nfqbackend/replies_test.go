package nfqbackend

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/decide/direction"
)

// replyLine is one line of a testdata/replies capture (see its README).
type replyLine struct {
	phase   string
	payload int
	kind    string
}

func readReplies(t *testing.T, path string) []replyLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []replyLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("%s: %q: want PHASE BYTES COUNT KIND", path, line)
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("%s: %q: %v", path, line, err)
		}
		out = append(out, replyLine{f[0], n, f[3]})
	}
	return out
}

// TestDefaultSmallSegmentsFitCaptures holds every per-port default to
// the captured reply sizes: each reply that clocks a writer is at or
// under the port's split (the write direction), each read data segment
// over it. The captures have both kinds for every protocol measured, so
// a default moved too low or too high fails here.
func TestDefaultSmallSegmentsFitCaptures(t *testing.T) {
	files, err := filepath.Glob("testdata/replies/*-*.txt")
	if err != nil || len(files) < 3 {
		t.Fatalf("captures: %v %v, want iSCSI, NFS and NBD", files, err)
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".txt")
		port, err := strconv.Atoi(name[strings.LastIndexByte(name, '-')+1:])
		if err != nil {
			t.Fatalf("%s: name must end in -PORT", path)
		}
		small, ok := plan.DefaultSmallSegments[uint16(port)]
		if !ok {
			t.Errorf("%s: port %d has no default", path, port)
			continue
		}
		var replies, data int
		for _, l := range readReplies(t, path) {
			dir := directionOf(l.payload, small)
			switch l.kind {
			case "reply":
				replies++
				if dir != direction.Write {
					t.Errorf("%s %s: a %d-byte reply that clocks a writer is over the split %d: classed as read", name, l.phase, l.payload, small)
				}
			case "data":
				data++
				if dir != direction.Read {
					t.Errorf("%s %s: a %d-byte read data segment is at or under the split %d: classed as write", name, l.phase, l.payload, small)
				}
			}
		}
		if replies == 0 || data == 0 {
			t.Errorf("%s: %d replies, %d data segments: a capture must have both", name, replies, data)
		}
	}
}

// TestISCSISplitMisclassesNFS is the finding, from the captures:
// the old one-for-all 128 bytes puts NFS WRITE replies in the read
// direction, so delaying "write" traffic did not slow NFS writers.
func TestISCSISplitMisclassesNFS(t *testing.T) {
	over := 0
	for _, l := range readReplies(t, "testdata/replies/nfs-2049.txt") {
		if l.kind == "reply" && directionOf(l.payload, DefaultSmallSegment) == direction.Read {
			over++
		}
	}
	if over == 0 {
		t.Error("no NFS write reply over 128 bytes: the per-port split would not be needed")
	}
}
