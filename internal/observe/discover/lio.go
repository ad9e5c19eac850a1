package discover

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// LIO discovers through the kernel target's configfs tree, normally
// /sys/kernel/config/target. What it relies on (drivers/target/
// target_core_configfs.c and iscsi/iscsi_target_configfs.c):
//
//   - iscsi/<target-iqn>/tpgt_N/enable: "1" when the portal group serves;
//
//   - iscsi/<target-iqn>/tpgt_N/lun/lun_M/<link> -> ../../../../../../
//     target/core/<hba>_K/<device>: the storage object of each LUN;
//
//   - core/<hba>_K/<device>/udev_path: the block device (iblock) or file
//     (fileio) behind it, as configured;
//
//   - iscsi/<target-iqn>/tpgt_N/acls/<initiator-iqn>/info: the session of
//     that initiator, with one "Address <ip> TCP ..." line per connection,
//     or "No active iSCSI Session for Initiator Endpoint: <iqn>".
//
//   - iscsi/<target-iqn>/tpgt_N/acls/<initiator-iqn>/lun_K/<link> ->
//     ../../../../lun/lun_M: the LUNs that initiator is given (mapped
//     LUNs, what targetcli creates under an ACL).
//
// Sessions of initiators without a node ACL (demo mode,
// generate_node_acls=1) have no info file and are not seen. A session
// uses the LUNs mapped in its ACL; an ACL without mapped LUNs is taken to
// see every LUN of the portal group. (The first fixtures had no lun_*
// under their ACLs, and the adapter gave every session every LUN; on a
// live LIO with one LUN per initiator that made a reader a consumer of
// the writers' LUNs, and the write rate of their devices made it
// throttleable.)
//
// prometheus/procfs's iscsi package reads the LUN links and udev_path
// too, but not ACL sessions, and it drops read errors; this reader reports
// them.
type LIO struct {
	root string
}

// NewLIO returns the adapter over a configfs target root.
func NewLIO(root string) *LIO { return &LIO{root: root} }

// Name implements Adapter.
func (l *LIO) Name() string { return "lio" }

// LIOSession is one initiator's session on a portal group.
type LIOSession struct {
	Initiator string
	Addrs     []netip.Addr
	// Backings are the udev_paths of the LUNs mapped in the initiator's
	// ACL; nil when the ACL maps none (then it uses the group's).
	Backings []string
}

// LIOGroup is one enabled target portal group.
type LIOGroup struct {
	Target   string
	TPGT     string
	Backings []string // udev_path of each LUN's storage object
	Sessions []LIOSession
}

// Groups reads every enabled portal group of every iSCSI target.
func (l *LIO) Groups() ([]LIOGroup, error) {
	iscsi := filepath.Join(l.root, "iscsi")
	targets, err := os.ReadDir(iscsi)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reading LIO configfs: %s does not exist: is configfs mounted and iscsi_target_mod loaded? (or set discovery.lio_root)", iscsi)
		}
		return nil, fmt.Errorf("reading LIO configfs: %w", err)
	}
	var out []LIOGroup
	for _, t := range targets {
		if !t.IsDir() || t.Name() == "discovery_auth" {
			continue
		}
		tpgs, err := filepath.Glob(filepath.Join(iscsi, t.Name(), "tpgt_*"))
		if err != nil {
			return nil, err
		}
		sort.Strings(tpgs)
		for _, tpg := range tpgs {
			en, err := os.ReadFile(filepath.Join(tpg, "enable"))
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", filepath.Join(tpg, "enable"), err)
			}
			if strings.TrimSpace(string(en)) != "1" {
				continue
			}
			g := LIOGroup{Target: t.Name(), TPGT: filepath.Base(tpg)}
			byLUN, err := l.lunBackings(tpg)
			if err != nil {
				return nil, err
			}
			for _, b := range byLUN {
				g.Backings = append(g.Backings, b.path)
			}
			if g.Sessions, err = l.sessions(tpg, byLUN); err != nil {
				return nil, err
			}
			out = append(out, g)
		}
	}
	return out, nil
}

// lunBacking is one LUN of a portal group and its backing store.
type lunBacking struct {
	lun  string // lun_M
	path string // udev_path
}

func (l *LIO) lunBackings(tpg string) ([]lunBacking, error) {
	luns, err := linkedDirs(filepath.Join(tpg, "lun", "lun_*"), "", "storage object link")
	if err != nil {
		return nil, err
	}
	var out []lunBacking
	for _, d := range luns {
		lun, link := d[0], d[1]
		obj, err := filepath.EvalSymlinks(link)
		if err != nil {
			return nil, fmt.Errorf("following storage object link %s: %w", link, err)
		}
		b, err := os.ReadFile(filepath.Join(obj, "udev_path"))
		if err != nil {
			return nil, fmt.Errorf("reading the backing store of %s: %w", lun, err)
		}
		p := strings.TrimSpace(string(b))
		if p == "" {
			return nil, fmt.Errorf("reading the backing store of %s: %s is empty (a ramdisk or user backstore has no device to measure)", lun, filepath.Join(obj, "udev_path"))
		}
		out = append(out, lunBacking{lun: filepath.Base(lun), path: p})
	}
	return out, nil
}

// linkedDirs are the directories matching pattern, sorted, each with the
// first symbolic link in it; one without is an error (what names the
// directories, kind the link in it).
func linkedDirs(pattern, what, kind string) ([][2]string, error) {
	dirs, err := filepath.Glob(pattern)
	if err != nil {
		return nil, err
	}
	sort.Strings(dirs)
	out := make([][2]string, 0, len(dirs))
	for _, d := range dirs {
		link, err := firstLink(d)
		if err != nil {
			return nil, fmt.Errorf("reading %s%s: %w", what, d, err)
		}
		if link == "" {
			return nil, fmt.Errorf("reading %s%s: no %s in it", what, d, kind)
		}
		out = append(out, [2]string{d, link})
	}
	return out, nil
}

// firstLink is the path of the first symbolic link in dir (configfs puts
// one in a LUN directory: to its storage object, or in an ACL's mapped
// LUN: to the portal group's LUN), "" when there is none.
func firstLink(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		if e.Type()&fs.ModeSymlink != 0 {
			return filepath.Join(dir, e.Name()), nil
		}
	}
	return "", nil
}

// mappedBackings returns the backing stores of the LUNs mapped in one ACL
// directory, nil when it maps none.
func mappedBackings(acl string, byLUN []lunBacking) ([]string, error) {
	mapped, err := linkedDirs(filepath.Join(acl, "lun_*"), "mapped LUN ", "link to a LUN")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range mapped {
		m, link := d[0], d[1]
		target, err := os.Readlink(link)
		if err != nil {
			return nil, fmt.Errorf("reading mapped LUN link in %s: %w", m, err)
		}
		lun := filepath.Base(target)
		found := false
		for _, b := range byLUN {
			if b.lun == lun {
				out = append(out, b.path)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("mapped LUN %s points to %s, which the portal group does not have", m, target)
		}
	}
	return out, nil
}

func (l *LIO) sessions(tpg string, byLUN []lunBacking) ([]LIOSession, error) {
	infos, err := filepath.Glob(filepath.Join(tpg, "acls", "*", "info"))
	if err != nil {
		return nil, err
	}
	sort.Strings(infos)
	var out []LIOSession
	for _, p := range infos {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		s, active, err := ParseLIOInfo(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if active {
			if s.Initiator == "" {
				s.Initiator = filepath.Base(filepath.Dir(p))
			}
			if s.Backings, err = mappedBackings(filepath.Dir(p), byLUN); err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// ParseLIOInfo parses an acls/<iqn>/info file; active is false when the
// initiator has no session.
func ParseLIOInfo(b []byte) (s LIOSession, active bool, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "No active iSCSI Session"):
			return LIOSession{}, false, nil
		case strings.HasPrefix(line, "InitiatorName:"):
			s.Initiator = strings.TrimSpace(strings.TrimPrefix(line, "InitiatorName:"))
			active = true
		case strings.HasPrefix(line, "Address "):
			// "Address 192.168.69.3 TCP  StatSN: 0x1a00d3e6"
			f := strings.Fields(line)
			a, perr := netip.ParseAddr(strings.Trim(f[1], "[]"))
			if perr != nil {
				return LIOSession{}, false, fmt.Errorf("line %d: %q: expected \"Address <IP> TCP ...\"", n, line)
			}
			s.Addrs = append(s.Addrs, a.Unmap())
			active = true
		}
	}
	if active && len(s.Addrs) == 0 {
		return LIOSession{}, false, fmt.Errorf("a session without any \"Address <IP>\" connection line")
	}
	return s, active, sc.Err()
}

// Attachments implements Adapter.
func (l *LIO) Attachments(context.Context) ([]Attachment, error) {
	groups, err := l.Groups()
	if err != nil {
		return nil, err
	}
	var out []Attachment
	for _, g := range groups {
		for _, s := range g.Sessions {
			b := s.Backings
			if b == nil {
				b = g.Backings
			}
			out = append(out, attachAll(g.Target, []session{{s.Initiator, s.Addrs}}, b)...)
		}
	}
	return out, nil
}
