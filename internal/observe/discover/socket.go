package discover

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// SocketConfig configures the socket adapter.
type SocketConfig struct {
	// Ports are the listening TCP ports of the storage server(s) on this
	// host (2049 for NFS, 10809 for NBD, ...).
	Ports []int
	// Exports are export list files (nfs-ganesha's configuration, or
	// /etc/exports) naming what the server serves. Empty: found from the
	// listening process (ganesha's own configuration, or the disk
	// images and block devices it holds open).
	Exports []string
	// Linger keeps a client for this long after its last connection
	// (0: DefaultLinger; negative: not at all).
	Linger time.Duration
	// ProcRoot is the /proc root ("/proc"); tests point it at testdata.
	ProcRoot string
	// netOf is the process whose network namespace's socket table is
	// read ("self" when empty): a live test reads a namespace of its own.
	netOf string
	// SysRoot is the sysfs root ("/sys"), for the device numbers of a
	// server's mounts (see mountns.go).
	SysRoot string
	// FileRoot is prepended to the paths of configuration files read
	// from a server's command line (ganesha's -f); "" is "/".
	FileRoot string
}

// Socket is the adapter for storage protocols without a target adapter
// (NFS, NBD, NVMe/TCP in user space, ...): the kernel's socket table
// gives the connected clients of each configured port, and the process
// that listens on it gives what they use. Every client of a port uses
// everything its server serves: a socket does not say which export or
// image a client has open. So clients of one server share its devices,
// and their write rates come from the wire (see internal/observe/attribution).
type Socket struct {
	cfg  SocketConfig
	pids map[uint16]int // the listener found last, per port: tried first
	// seen is when each client of each port last had a connection:
	// clients that connect per job (libnfs tools, qemu-img) come and go
	// between discoveries, and a consumer that flickers in and out of
	// the topology would lose its rate history and throttle each time.
	seen map[uint16]map[netip.Addr]time.Time
	now  func() time.Time
}

// DefaultLinger is how long a client stays a consumer after its last
// connection closed: several discovery intervals, under a minute.
const DefaultLinger = 30 * time.Second

// NewSocket checks the configuration once.
func NewSocket(cfg SocketConfig) (*Socket, error) {
	if len(cfg.Ports) == 0 {
		return nil, errors.New("socket discovery: no ports: set ports = [2049] (the listening ports of the storage server)")
	}
	for _, p := range cfg.Ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("socket discovery: port %d: must be between 1 and 65535", p)
		}
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/sys"
	}
	if cfg.Linger == 0 {
		cfg.Linger = DefaultLinger
	}
	return &Socket{cfg: cfg, pids: map[uint16]int{}, seen: map[uint16]map[netip.Addr]time.Time{}, now: time.Now}, nil
}

// Name implements Adapter.
func (s *Socket) Name() string { return "socket" }

// Attachments implements Adapter: every established client of a
// configured port, attached to everything the port's server serves. A
// port nobody listens on has no clients (the server may be restarting);
// if none of the ports has a listener, that is an error.
func (s *Socket) Attachments(ctx context.Context) ([]Attachment, error) {
	socks, err := readProcNet(s.cfg.ProcRoot, s.cfg.netOf)
	if err != nil {
		return nil, err
	}
	var out []Attachment
	listening := 0
	for _, p := range s.cfg.Ports {
		port := uint16(p)
		ino, ok := listenInode(socks, port)
		if !ok {
			continue
		}
		listening++
		clients := s.linger(port, clientsOf(socks, port))
		if len(clients) == 0 {
			continue
		}
		name, served, err := s.served(port, ino)
		if err != nil {
			return nil, err
		}
		target := name + ":" + strconv.Itoa(p)
		for _, c := range clients {
			for _, b := range served {
				out = append(out, Attachment{Target: target, Addr: c, Backing: b})
			}
		}
	}
	if listening == 0 {
		return nil, fmt.Errorf("socket discovery: nothing listens on TCP port(s) %v in this network namespace; start the storage server, or run sanqos in the server's namespace", s.cfg.Ports)
	}
	return out, nil
}

// linger adds to the clients connected now those of port seen within
// the linger time, sorted, and forgets the older ones.
func (s *Socket) linger(port uint16, now []netip.Addr) []netip.Addr {
	t := s.now()
	m := s.seen[port]
	if m == nil {
		m = map[netip.Addr]time.Time{}
		s.seen[port] = m
	}
	for _, a := range now {
		m[a] = t
	}
	var out []netip.Addr
	for a, at := range m {
		if t.Sub(at) > max(s.cfg.Linger, 0) {
			delete(m, a)
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// listenInode returns the inode of a socket listening on port (any local
// address, either family).
func listenInode(socks []sockEntry, port uint16) (uint64, bool) {
	for _, e := range socks {
		if e.State == tcpListen && e.Local.Port() == port && e.Inode != 0 {
			return e.Inode, true
		}
	}
	return 0, false
}

// clientsOf returns the addresses with a connection to port, established
// or closing (a client that has just left still counts, see linger),
// sorted, each once (a client with several connections, as NFS and
// multi-connection NBD clients have, is one consumer).
func clientsOf(socks []sockEntry, port uint16) []netip.Addr {
	var out []netip.Addr
	for _, e := range socks {
		if connected(e.State) && e.Local.Port() == port {
			out = append(out, e.Remote.Addr())
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}

// served says what the server on port serves, and names the server.
func (s *Socket) served(port uint16, ino uint64) (string, []string, error) {
	if len(s.cfg.Exports) > 0 {
		var all []string
		for _, f := range s.cfg.Exports {
			ps, err := readExports(f)
			if err != nil {
				return "", nil, err
			}
			all = append(all, ps...)
		}
		slices.Sort(all)
		return "exports", slices.Compact(all), nil
	}
	l, ok, err := findListener(s.cfg.ProcRoot, ino, s.pids[port])
	if err != nil {
		return "", nil, fmt.Errorf("socket discovery: port %d: %w", port, err)
	}
	if !ok {
		return "", nil, fmt.Errorf("socket discovery: port %d: no process holds its listening socket (a kernel server such as knfsd?); name what it serves with discovery.exports = [\"/etc/exports\"]", port)
	}
	s.pids[port] = l.PID
	if l.Comm == "ganesha.nfsd" {
		conf := filepath.Join(s.cfg.FileRoot, ganeshaConfig(l.Args))
		if c := ganeshaConfig(l.Args); !filepath.IsAbs(c) {
			// Relative to the directory ganesha was started in.
			conf = filepath.Join(s.cfg.ProcRoot, strconv.Itoa(l.PID), "cwd", c)
		}
		ps, err := readExports(conf)
		if err != nil {
			return "", nil, fmt.Errorf("socket discovery: port %d is nfs-ganesha (pid %d): %w; or name the exports with discovery.exports", port, l.PID, err)
		}
		return l.Comm, s.ownNS(l.PID, ps), nil
	}
	files, err := servedFiles(s.cfg.ProcRoot, l.PID)
	if err != nil {
		return "", nil, fmt.Errorf("socket discovery: port %d: %s (pid %d): %w", port, l.Comm, l.PID, err)
	}
	if len(files) == 0 {
		return "", nil, fmt.Errorf("socket discovery: port %d: %s (pid %d) holds no disk image, block device or data file open; name what it serves with discovery.exports", port, l.Comm, l.PID)
	}
	return l.Comm, s.ownNS(l.PID, files), nil
}

// ownNS makes the paths process pid serves resolvable here (mountns.go).
func (s *Socket) ownNS(pid int, paths []string) []string {
	if inOwnMountNS(s.cfg.ProcRoot, pid) {
		return paths
	}
	return devicesInNS(s.cfg.ProcRoot, s.cfg.SysRoot, pid, paths)
}
