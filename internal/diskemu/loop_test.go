package diskemu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSmokeLoop(t *testing.T) {
	s := mountT(t, Options{Profile: "fixed:5ms"})
	img := filepath.Join(s.Mountpoint(), "lun0.img")
	makeImage(t, img, 64<<20)
	dev := loopAttach(t, img)
	dio, _ := os.ReadFile("/sys/block/" + dev + "/loop/dio")
	t.Logf("dev %s dio=%s", dev, strings.TrimSpace(string(dio)))
	r0, ms0 := diskstat(t, dev)
	start := time.Now()
	out, err := exec.Command("fio", "--name=r", "--filename=/dev/"+dev, "--ioengine=libaio", "--iodepth=8", "--direct=1", "--rw=randread", "--bs=8k", "--runtime=2", "--time_based", "--output-format=terse").CombinedOutput()
	if err != nil {
		t.Fatalf("%v %s", err, out)
	}
	r1, ms1 := diskstat(t, dev)
	t.Logf("reads %d in %v, r_await %.2f ms, stats %+v", r1-r0, time.Since(start), float64(ms1-ms0)/float64(r1-r0), s.Stats().IOStats)
	t.Logf("max in flight %d", s.Stats().MaxInFlight)
}
