package discover

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/sanqos/sanqos/internal/observe/topology"
)

func BenchmarkParseTgtShow(b *testing.B) {
	in, err := os.ReadFile("testdata/tgt/show-target.txt")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := ParseTgtShow(in); err != nil {
			b.Fatal(err)
		}
	}
}

// A whole discovery over fixtures: configfs walk, sysfs walk, grouping.
func BenchmarkDiscoverLIO(b *testing.B) {
	res := topology.NewResolver("../topology/testdata/sys", "../topology/testdata/dev", "../topology/testdata/mountinfo")
	d := New(NewLIO("testdata/lio/target"), res, slog.New(slog.DiscardHandler))
	for b.Loop() {
		if _, err := d.Discover(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
