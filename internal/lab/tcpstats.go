package lab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
)

// TCPStats are a namespace's TCP counters from /proc/net/snmp, which the
// experiments compare before and after a run: a throttled run must show no
// retransmissions (delaying packets must never look like loss).
type TCPStats struct {
	InSegs, OutSegs, RetransSegs uint64
}

// TCPStats reads the TCP counters of a lab namespace.
func (l *Lab) TCPStats(ctx context.Context, ns string) (TCPStats, error) {
	out, err := inNS(ctx, l.r, ns, "cat", "/proc/net/snmp")
	if err != nil {
		return TCPStats{}, fmt.Errorf("reading TCP counters of %s: %w", ns, err)
	}
	return parseSNMP(out)
}

// parseSNMP reads the "Tcp:" header and value lines of /proc/net/snmp.
func parseSNMP(b []byte) (TCPStats, error) {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		if len(f)-1 != len(names) {
			return TCPStats{}, fmt.Errorf("/proc/net/snmp: Tcp has %d names but %d values", len(names), len(f)-1)
		}
		var st TCPStats
		found := 0
		for i, n := range names {
			dst := map[string]*uint64{"InSegs": &st.InSegs, "OutSegs": &st.OutSegs, "RetransSegs": &st.RetransSegs}[n]
			if dst == nil {
				continue
			}
			v, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return TCPStats{}, fmt.Errorf("/proc/net/snmp: Tcp %s: %w", n, err)
			}
			*dst = v
			found++
		}
		if found != 3 {
			return TCPStats{}, fmt.Errorf("/proc/net/snmp: Tcp lacks InSegs, OutSegs or RetransSegs")
		}
		return st, nil
	}
	return TCPStats{}, fmt.Errorf("/proc/net/snmp has no Tcp lines")
}
