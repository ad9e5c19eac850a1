package owned

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Ownership. Several sanqos instances may run in one network namespace
// (different queues, different devices), and an operator's
// `--cleanup-only` may run beside a live one. Every kernel object carries
// the name of the instance that made it:
//
//   - chain SANQOS-<instance> in the mangle table, jumped to once from
//     POSTROUTING;
//   - ipsets sanqos-<instance>-<group>;
//   - tc backends: the root qdisc on the device, whose instance is named
//     after the device (one root qdisc per device).
//
// An instance holds a lock while it lives: a flock(2) on
// LockDir/<netns inode>-<instance>.lock, which the kernel releases when
// the process dies, however it dies. Start-up and Close
// touch only the instance's own objects, and the leftovers of instances
// that are provably dead: objects whose instance lock is free (a free
// lock is taken for the time of the removal, so an instance starting
// meanwhile waits). The names of versions before ownership (chain SANQOS,
// sets sanqos-<group>) have no lock and count as dead leftovers.

// MaxInstance is the longest instance name: the chain name must stay
// within iptables' 28 characters and the set prefix leave room for the
// group in ipset's 31.
const MaxInstance = 8

// MaxSetName is the kernel's limit on ipset names (IPSET_MAXNAMELEN - 1).
const MaxSetName = 31

var instanceRE = regexp.MustCompile(`^[a-z0-9]{1,8}$`)

// CheckInstance validates an instance name.
func CheckInstance(name string) error {
	if !instanceRE.MatchString(name) {
		return fmt.Errorf("instance name %q: use 1 to %d lower-case letters or digits (it names the iptables chain, ipsets and lock)", name, MaxInstance)
	}
	return nil
}

// Owner names the kernel objects of one instance. The zero Owner uses
// the names of versions before ownership (tests of the rules only). The
// instance's IPv6 half (V6) has its chain in ip6tables, under the same
// name, and its sets (family inet6) marked with v6Mark after the
// instance name: sanqos-<instance>.6-<group>.
type Owner struct {
	Name string
	V6   bool
}

// v6Mark follows the instance name in the names of its IPv6 sets.
const v6Mark = ".6"

// IsV6Set reports whether a set name is of an owner's IPv6 half.
func IsV6Set(name string) bool {
	rest, ok := strings.CutPrefix(name, SetPrefix)
	inst, _, found := strings.Cut(rest, "-")
	return ok && found && strings.HasSuffix(inst, v6Mark)
}

// Chain is the owner's iptables Chain.
func (o Owner) Chain() string {
	if o.Name == "" {
		return Chain
	}
	return Chain + "-" + o.Name
}

// SetPrefix starts the name of every ipset of the owner.
func (o Owner) SetPrefix() string {
	if o.Name == "" {
		return SetPrefix
	}
	if o.V6 {
		return SetPrefix + o.Name + v6Mark + "-"
	}
	return SetPrefix + o.Name + "-"
}

// Set turns a group's set name (plan.SetName) into the owner's: the
// same suffix after the owner's prefix, hashed to fit when too long.
func (o Owner) Set(logical string) string {
	rest := strings.TrimPrefix(logical, SetPrefix)
	p := o.SetPrefix()
	if len(p)+len(rest) <= MaxSetName {
		return p + rest
	}
	sum := sha256.Sum256([]byte(rest))
	h := hex.EncodeToString(sum[:4])
	return p + rest[:MaxSetName-len(p)-len(h)-1] + "-" + h
}

var RuleSetRef = regexp.MustCompile(`(--(?:match|add)-set )(\S+)`)

// Rule rewrites a Rule of the logical chain and sets into the owner's.
func (o Owner) Rule(r string) string {
	if r == InputJump(Chain) {
		return InputJump(o.Chain())
	}
	r = strings.Replace(r, "-A "+Chain+" ", "-A "+o.Chain()+" ", 1)
	return RuleSetRef.ReplaceAllStringFunc(r, func(m string) string {
		sub := RuleSetRef.FindStringSubmatch(m)
		return sub[1] + o.Set(sub[2])
	})
}

// ChainOwner says whose chain name is: ok false for chains not ours at
// all, "" for a chain of a version before ownership.
func ChainOwner(name string) (inst string, ok bool) {
	if name == Chain {
		return "", true
	}
	inst, ok = strings.CutPrefix(name, Chain+"-")
	return inst, ok && instanceRE.MatchString(inst)
}

// SetOwner says whose set name is (see chainOwner). A set of a version
// before ownership whose group name has a dash reads as owned by the part
// before it; such an instance is almost surely dead, and if it lives its
// lock keeps the set.
func SetOwner(name string) (inst string, ok bool) {
	rest, ok := strings.CutPrefix(name, SetPrefix)
	if !ok {
		return "", false
	}
	inst, _, found := strings.Cut(rest, "-")
	inst = strings.TrimSuffix(inst, v6Mark)
	if !found || !instanceRE.MatchString(inst) {
		return "", true
	}
	return inst, true
}

// LockDir holds the instance locks: one file per instance and network
// namespace, <netns inode>-<instance>.lock, locked with flock(2) for as
// long as the instance lives; the kernel releases the lock when the
// process dies, however it dies. The directory is root's and writable
// only by root, so no other user can take or squat a lock (an abstract
// unix socket, the lock of earlier versions, can be bound by any user of
// the namespace). It is not /run/sanqos: systemd removes a unit's
// RuntimeDirectory when the unit stops, which would unlink the lock file
// of a second instance running outside the unit and let a third take the
// "same" lock on a new file. A lock file is removed only by its holder,
// under the lock (see openLocked); each is empty. A variable for tests.
var LockDir = "/run/sanqos-locks"

// legacyLockPrefix names the locks of versions before LockDir: abstract
// unix sockets. An instance still binds its name, where it can, so that
// an older binary (say, a --cleanup-only of the previous package during
// an upgrade) sees it running. When the name is taken, its holder counts
// only if it is root's (a sanqos of an earlier version still running):
// any user can bind the name, and the lock must not be theirs to take.
const legacyLockPrefix = "@sanqos-instance-"

// ErrInstanceRunning says the instance's lock is held by a live process.
var ErrInstanceRunning = errors.New("a sanqos instance of that name is running in this network namespace")

// Lock is held for as long as an instance lives: the locked file
// (fd, at path) and, if it could be bound, the legacy abstract socket
// (sock, -1 when not).
type Lock struct {
	fd, sock int
	path     string
}

// LockPath is the lock file of instance name in network namespace ns (0:
// the caller's).
func LockPath(ns int, name string) (string, error) {
	var st unix.Stat_t
	var err error
	if ns == 0 {
		err = unix.Stat("/proc/thread-self/ns/net", &st)
	} else {
		err = unix.Fstat(ns, &st)
	}
	if err != nil {
		return "", fmt.Errorf("reading the network namespace's identity: %w", err)
	}
	return filepath.Join(LockDir, fmt.Sprintf("%d-%s.lock", st.Ino, name)), nil
}

// openLockDir creates LockDir (mode 0700) if it is missing and opens it,
// refusing a directory another user could write to: whoever can write
// there can replace a lock file and so run a second instance beside a
// live one, or keep every instance from starting.
func openLockDir() (int, error) {
	if err := os.Mkdir(LockDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return -1, fmt.Errorf("creating the lock directory %s: %w", LockDir, err)
	}
	dfd, err := unix.Open(LockDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening the lock directory %s (it must be a directory, not a symlink): %w", LockDir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		unix.Close(dfd)
		return -1, fmt.Errorf("checking the lock directory %s: %w", LockDir, err)
	}
	// Root's, or (tests, unprivileged runs) the caller's own.
	if (st.Uid != 0 && int(st.Uid) != os.Geteuid()) || st.Mode&0o022 != 0 {
		unix.Close(dfd)
		return -1, fmt.Errorf("lock directory %s is owned by uid %d with mode %04o: another user could take or replace instance locks; remove it (sanqos creates it again, root's, mode 0700)", LockDir, st.Uid, st.Mode&0o7777)
	}
	return dfd, nil
}

// bindLock takes the lock of instance name in network namespace ns (0:
// the caller's) if it is free; EWOULDBLOCK says another process holds
// it.
func bindLock(ns int, name string) (*Lock, error) {
	path, err := LockPath(ns, name)
	if err != nil {
		return nil, err
	}
	dfd, err := openLockDir()
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	base := filepath.Base(path)
	fd, err := openLocked(dfd, base)
	if err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, err
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	lk := &Lock{fd: fd, sock: -1, path: path}
	// See legacyLockPrefix.
	var olderRuns bool
	_ = inNetNS(ns, func() error {
		s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = unix.Bind(s, &unix.SockaddrUnix{Name: legacyLockPrefix + name})
		if err == nil {
			lk.sock = s
			return nil
		}
		unix.Close(s)
		if errors.Is(err, unix.EADDRINUSE) {
			uid, found, err := abstractOwner(legacyLockPrefix[1:] + name)
			olderRuns = err == nil && found && uid == 0
		}
		return err
	})
	if olderRuns {
		lk.Release()
		return nil, fmt.Errorf("%w (a sanqos of an earlier version, as root, holds %s%s)", unix.EWOULDBLOCK, legacyLockPrefix, name)
	}
	return lk, nil
}

// abstractOwner returns the uid that owns the unix socket bound to the
// abstract name (without its leading @) in this thread's network
// namespace, from a sock_diag dump: root's is an instance of an earlier
// version, anyone else's a squatter.
func abstractOwner(name string) (uid uint32, found bool, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, false, fmt.Errorf("opening sock_diag: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(time.Second))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	// struct nlmsghdr, then struct unix_diag_req: family, protocol, pad,
	// states, ino, show, cookie[2].
	const (
		hdr          = unix.SizeofNlMsghdr
		showName     = 0x01 // UDIAG_SHOW_NAME
		showUID      = 0x40 // UDIAG_SHOW_UID
		attrName     = 0    // UNIX_DIAG_NAME
		attrUID      = 7    // UNIX_DIAG_UID
		sizeofMsg    = 16   // struct unix_diag_msg
		sizeofRtAttr = 4
	)
	b := make([]byte, hdr+24)
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(b[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	b[hdr] = unix.AF_UNIX
	binary.NativeEndian.PutUint32(b[hdr+4:], 0xffffffff)
	binary.NativeEndian.PutUint32(b[hdr+12:], showName|showUID)
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, false, fmt.Errorf("asking sock_diag: %w", err)
	}
	want := "\x00" + name
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return 0, false, fmt.Errorf("reading sock_diag: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return 0, false, fmt.Errorf("parsing sock_diag: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return 0, false, nil
			case unix.NLMSG_ERROR:
				return 0, false, errors.New("sock_diag refused the dump")
			}
			if len(m.Data) < sizeofMsg {
				continue
			}
			var sname string
			var suid uint32
			var hasUID bool
			for a := m.Data[sizeofMsg:]; len(a) >= sizeofRtAttr; {
				l := int(binary.NativeEndian.Uint16(a))
				if l < sizeofRtAttr || l > len(a) {
					break
				}
				switch v := a[sizeofRtAttr:l]; binary.NativeEndian.Uint16(a[2:]) {
				case attrName:
					sname = string(v)
				case attrUID:
					if len(v) >= 4 {
						suid, hasUID = binary.NativeEndian.Uint32(v), true
					}
				}
				a = a[min(len(a), (l+3)&^3):]
			}
			if sname == want && hasUID {
				return suid, true, nil
			}
		}
	}
}

// openLocked opens and locks the lock file name in directory dfd. A
// holder removes its file before it lets go of it (see release), so a
// file locked after it was removed is stale: the lock is the one on the
// file the name now leads to.
func openLocked(dfd int, name string) (int, error) {
	for range 100 {
		fd, err := unix.Openat(dfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return -1, err
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			unix.Close(fd)
			return -1, err
		}
		var held, now unix.Stat_t
		if err := unix.Fstat(fd, &held); err != nil {
			unix.Close(fd)
			return -1, err
		}
		err = unix.Fstatat(dfd, name, &now, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && now.Dev == held.Dev && now.Ino == held.Ino {
			return fd, nil
		}
		unix.Close(fd)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return -1, err
		}
	}
	return -1, errors.New("the lock file keeps being replaced")
}

// LockInstance takes the lock of instance name in network namespace ns.
// An instance that is only being checked by another's clean-up holds it
// for milliseconds, so a few tries over 200 ms tell that from a live
// instance.
func LockInstance(ns int, name string) (*Lock, error) {
	var err error
	for range 10 {
		var lk *Lock
		if lk, err = bindLock(ns, name); err == nil {
			return lk, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("taking the lock of sanqos instance %q: %w", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	path, _ := LockPath(ns, name)
	if err == unix.EWOULDBLOCK {
		return nil, fmt.Errorf("instance %q (lock %s): %w", name, path, ErrInstanceRunning)
	}
	// The holder is an earlier version's: say so.
	return nil, fmt.Errorf("instance %q (lock %s): %w: %v", name, path, ErrInstanceRunning, err)
}

// TryLockDead takes the lock of instance name if it is free, at once.
func TryLockDead(ns int, name string) (*Lock, bool) {
	lk, err := bindLock(ns, name)
	return lk, err == nil
}

func (lk *Lock) Release() {
	if lk == nil {
		return
	}
	if lk.sock >= 0 {
		unix.Close(lk.sock)
		lk.sock = -1
	}
	if lk.fd >= 0 {
		// Removed while still locked, so that LockDir does not fill
		// with the files of instances and namespaces long gone; a taker
		// that opened it meanwhile sees it is stale (openLocked). A
		// process that dies leaves its file, which the next taker reuses.
		unix.Unlink(lk.path)
		unix.Close(lk.fd)
		lk.fd = -1
	}
}

// inNetNS runs f on a thread in network namespace ns (0: here).
func inNetNS(ns int, f func() error) error {
	if ns == 0 {
		return f()
	}
	ch := make(chan error, 1)
	go func() {
		// A thread that cannot return to its namespace must not run
		// anything else: exiting while locked makes the runtime end it.
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- fmt.Errorf("reading this thread's network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("entering network namespace: %w", err)
			return
		}
		ferr := f()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			ch <- errors.Join(ferr, fmt.Errorf("returning to the original network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		ch <- ferr
	}()
	return <-ch
}

// DevInstance is the default instance name of a backend that owns a
// device's root qdisc (netem, htb, edt): "t" and the device, hashed when
// too long to spell out, so that one root qdisc has one owner.
func DevInstance(dev string) string {
	var b strings.Builder
	b.WriteByte('t')
	for _, r := range strings.ToLower(dev) {
		if (r >= 'a' && r <= 'z' || r >= '0' && r <= '9') && b.Len() < MaxInstance {
			b.WriteRune(r)
		}
	}
	if b.Len() < 2 || len(dev) > MaxInstance-1 {
		// Too long to spell out: a hash keeps distinct devices apart.
		sum := sha256.Sum256([]byte(dev))
		return "t" + hex.EncodeToString(sum[:])[:MaxInstance-1]
	}
	return b.String()
}
