package discover

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The kernel's TCP socket table, as /proc/net/tcp and /proc/net/tcp6 show
// it for the reader's network namespace. The socket adapter needs three
// columns of it: the local and remote address:port, the state and the
// socket's inode (which names the socket in /proc/PID/fd). A netlink
// sock_diag dump would say the same; the text is enough at one read per
// discovery (seconds apart) and is what a fixture can hold.

// TCP states of the table's "st" column (include/net/tcp_states.h).
const (
	tcpEstablished = 0x01
	tcpListen      = 0x0A
)

// connected reports whether a socket in state st has, or just had, a
// peer: established, or closing (FIN_WAIT1/2, TIME_WAIT, CLOSE_WAIT,
// LAST_ACK, CLOSING). SYN_RECV is not: a scan or a refused client is no
// consumer.
func connected(st int) bool {
	switch st {
	case tcpEstablished, 0x04, 0x05, 0x06, 0x08, 0x09, 0x0B:
		return true
	}
	return false
}

// sockEntry is one line of the table.
type sockEntry struct {
	Local, Remote netip.AddrPort
	State         int
	Inode         uint64
}

// readProcNet reads tcp and tcp6 under the net directory of a /proc root
// (normally /proc/self/net: the daemon's network namespace; of process
// pid's namespace when pid is not ""). A missing tcp6 (IPv6 disabled) is
// no error.
func readProcNet(procRoot, pid string) ([]sockEntry, error) {
	if pid == "" {
		pid = "self"
	}
	var all []sockEntry
	for _, name := range []string{"tcp", "tcp6"} {
		p := filepath.Join(procRoot, pid, "net", name)
		f, err := os.Open(p)
		if err != nil {
			if name == "tcp6" && os.IsNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("reading the socket table: %w", err)
		}
		es, err := parseProcNet(f, p)
		f.Close()
		if err != nil {
			return nil, err
		}
		all = append(all, es...)
	}
	return all, nil
}

// parseProcNet parses one /proc/net/tcp{,6} file (the header line first).
// A malformed line is an error naming the file and line: the format has
// not changed in decades, so one would mean we read the wrong file.
func parseProcNet(r io.Reader, name string) ([]sockEntry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var out []sockEntry
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if line == 1 || len(f) == 0 {
			continue // header
		}
		if len(f) < 10 {
			return nil, fmt.Errorf("%s line %d: %d fields, want at least 10", name, line, len(f))
		}
		local, err := parseHexAddrPort(f[1])
		if err != nil {
			return nil, fmt.Errorf("%s line %d: local address: %w", name, line, err)
		}
		remote, err := parseHexAddrPort(f[2])
		if err != nil {
			return nil, fmt.Errorf("%s line %d: remote address: %w", name, line, err)
		}
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: state %q: %w", name, line, f[3], err)
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: inode %q: %w", name, line, f[9], err)
		}
		out = append(out, sockEntry{Local: local, Remote: remote, State: int(st), Inode: ino})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return out, nil
}

// parseHexAddrPort reads "0100007F:0CBC" (127.0.0.1:3260): the address as
// the kernel's 32-bit words in host byte order (little-endian on every
// machine sanqos runs on), the port in big-endian hex. IPv4-mapped IPv6
// addresses are unmapped, so a client is one address whichever socket
// family the server listens on.
func parseHexAddrPort(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("%q: want ADDR:PORT in hex", s)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("%q: want 8 or 32 hex digits", a)
	}
	for i := 0; i < len(raw); i += 4 {
		w := binary.LittleEndian.Uint32(raw[i:])
		binary.BigEndian.PutUint32(raw[i:], w)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q: %w", p, err)
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}
