package blkprobe

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// devNum is a block device's major:minor as /proc/diskstats shows it.
type devNum struct{ major, minor uint32 }

// kernelDev is the in-kernel dev_t encoding (MKDEV: major<<20 | minor),
// which is what bd_dev holds and the BPF program compares.
func (d devNum) kernelDev() uint32 { return d.major<<20 | d.minor }

// readDiskstats maps device names to their numbers from procRoot/diskstats.
func readDiskstats(procRoot string) (map[string]devNum, error) {
	// One read: kernel pseudo-files report no useful size.
	b, err := os.ReadFile(filepath.Join(procRoot, "diskstats"))
	if err != nil {
		return nil, fmt.Errorf("reading device numbers: %w", err)
	}
	return parseDiskstatsNames(bytes.NewReader(b))
}

// parseDiskstatsNames takes the first three fields of each line (major,
// minor, name) and ignores lines that do not have them.
func parseDiskstatsNames(r io.Reader) (map[string]devNum, error) {
	out := map[string]devNum{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		ma, err1 := strconv.ParseUint(f[0], 10, 32)
		mi, err2 := strconv.ParseUint(f[1], 10, 32)
		if err1 != nil || err2 != nil || mi >= 1<<20 {
			continue
		}
		out[f[2]] = devNum{uint32(ma), uint32(mi)}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading device numbers: %w", err)
	}
	return out, nil
}

// resolveDevices turns names ("loop0" or "/dev/loop0") into numbers,
// dropping duplicates and keeping the order given.
func resolveDevices(names []string, table map[string]devNum) ([]string, []devNum, error) {
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("no device to watch: name at least one as in /proc/diskstats (e.g. loop0)")
	}
	var outN []string
	var outD []devNum
	seen := map[string]bool{}
	for _, n := range names {
		n = strings.TrimPrefix(n, "/dev/")
		if seen[n] {
			continue
		}
		seen[n] = true
		d, ok := table[n]
		if !ok {
			return nil, nil, fmt.Errorf("device %q is not in /proc/diskstats: name it as listed there (e.g. loop0, sda, nvme0n1)", n)
		}
		outN = append(outN, n)
		outD = append(outD, d)
	}
	if len(outN) > MaxDevices {
		return nil, nil, fmt.Errorf("%d devices to watch, the probe holds at most %d", len(outN), MaxDevices)
	}
	return outN, outD, nil
}
