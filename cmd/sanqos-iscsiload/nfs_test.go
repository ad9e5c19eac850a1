package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/lab/iolog"
	"github.com/sanqos/sanqos/internal/lab/loadspec"
)

// TestOwnDevicesEachThreadAtTheOffset: with a device of its own per
// thread (an NFS file each), every thread works on the same region of
// its own device, from the job's offset, and nothing outside it.
func TestOwnDevicesEachThreadAtTheOffset(t *testing.T) {
	files := []*memLUN{newMemLUN(1 << 20), newMemLUN(1 << 20), newMemLUN(1 << 20)}
	job := loadspec.Job{Name: "own", Mode: loadspec.Write, BlockSize: 8192, Offset: 256 << 10, Size: 512 << 10, Threads: 3, Seed: 1}
	var out bytes.Buffer
	e := &Generator{Job: job, Clock: clock.Real{}, Out: iolog.NewWriter(&out), OwnDevices: true,
		Log:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Open: func(th int) (Device, error) { return files[th-1].open(th) }}
	res, err := e.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.bytes != 3*512<<10 {
		t.Fatalf("moved %d bytes, want %d", res.bytes, 3*512<<10)
	}
	zero := make([]byte, 256<<10)
	for i, f := range files {
		if f.opened != 1 || f.closed != 1 {
			t.Errorf("file %d opened %d, closed %d times", i+1, f.opened, f.closed)
		}
		if !bytes.Equal(f.data[:256<<10], zero) || !bytes.Equal(f.data[768<<10:], zero) {
			t.Errorf("file %d: writes outside [offset, offset+size)", i+1)
		}
		if bytes.Equal(f.data[256<<10:512<<10], zero) {
			t.Errorf("file %d: its region was not written", i+1)
		}
	}
	// A file too small for the job is refused before any I/O.
	small := newMemLUN(512 << 10)
	e.Open = func(th int) (Device, error) {
		if th == 2 {
			return small.open(th)
		}
		return files[th-1].open(th)
	}
	if _, err := e.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "thread 2") {
		t.Fatalf("small file: %v", err)
	}
}

func TestParseNFSURL(t *testing.T) {
	s, e, err := parseNFSURL("nfs://10.213.0.253/var/tmp/sanqos-lab/nfs/export")
	if err != nil || s != "10.213.0.253" || e != "/var/tmp/sanqos-lab/nfs/export" {
		t.Fatalf("got %q %q %v", s, e, err)
	}
	for _, bad := range []string{"", "10.213.0.253:/export", "nfs://host", "nfs:///export", "nfs://host:2049/export", "nfs://host/export?version=4", "iscsi://host/x"} {
		if _, _, err := parseNFSURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestNFSFileNames(t *testing.T) {
	for _, c := range []struct {
		pattern string
		thread  int
		want    string
	}{
		{"b3-w%d.dat", 4, "/b3-w4.dat"},
		{"/dir/b2-r%d.dat", 1, "/dir/b2-r1.dat"},
		{"load", 2, "/load.2"},
	} {
		if got := (nfsTarget{File: c.pattern}).fileName(c.thread); got != c.want {
			t.Errorf("%q thread %d: %q, want %q", c.pattern, c.thread, got, c.want)
		}
	}
}

// TestCLIChoosesTheProtocol: --nfs selects NFS and excludes the iSCSI
// flags; a bad --nfs-file is a usage error.
func TestCLIChoosesTheProtocol(t *testing.T) {
	var stderr bytes.Buffer
	o, code := parseCLI([]string{"--nfs", "nfs://10.0.0.1/export", "--nfs-file", "b3-w%d.dat", "--job", "seqwrite-64k", "--size", "64m"}, &stderr)
	if code != -1 || o.nfs.Server != "10.0.0.1" || o.nfs.Export != "/export" || o.probeAddr() != "10.0.0.1:2049" {
		t.Fatalf("code %d, %+v: %s", code, o.nfs, stderr.String())
	}
	g := o.generator(io.Discard, io.Discard)
	if !g.OwnDevices {
		t.Error("NFS threads do not own their devices")
	}
	o, code = parseCLI([]string{"--portal", "10.0.0.1", "--target", "iqn.x:y"}, &stderr)
	if code != -1 || o.probeAddr() != "10.0.0.1:3260" || o.generator(io.Discard, io.Discard).OwnDevices {
		t.Fatalf("iSCSI: code %d, %+v", code, o)
	}
	for _, args := range [][]string{
		{"--nfs", "nfs://h/e", "--portal", "h"},
		{"--nfs", "nfs://h/e", "--nfs-file", "a%sb"},
		{"--nfs", "nfs://h/e", "--nfs-file", "%d-%d"},
		{"--nfs", "h:/e"},
		{},
	} {
		stderr.Reset()
		if _, code := parseCLI(args, &stderr); code != 2 {
			t.Errorf("%q: code %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}
