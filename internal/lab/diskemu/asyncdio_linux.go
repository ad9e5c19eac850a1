package diskemu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Why this exists: a loop device with direct I/O submits each request to
// the backing file as asynchronous direct I/O. FUSE keeps such a request
// asynchronous only if the server accepted FUSE_ASYNC_DIO at INIT; otherwise
// fuse_direct_IO() waits for the reply before the loop worker can submit the
// next request, so each loop device (one LUN) has at most one request in the
// array model, and a reader never queues behind a writer LUN's several
// outstanding writes as it would on the thesis's RAID array
// (TestLoopQueueDepth shows both cases). go-fuse v2.7.2 masks
// FUSE_ASYNC_DIO out of its INIT reply and has no option for it.
//
// initShim handles only the INIT handshake: go-fuse's NewServer reads INIT
// and writes its reply synchronously, before any other reader exists, from
// "/dev/fd/N" where N is one end of a SOCK_SEQPACKET socket pair (one
// message per read/write, like /dev/fuse). The shim passes INIT through, sets
// FUSE_ASYNC_DIO in the reply if the kernel offered it, and then, before
// Serve starts, dup3()s /dev/fuse over N. From then on go-fuse talks to the
// kernel directly: no per-request cost. (A proxy for every message cost
// 3-4x the FUSE path's latency.)
type initShim struct {
	kfd, mine, theirs int
	result            chan initResult
}

type initResult struct {
	granted bool
	err     error
}

// FUSE wire constants (include/uapi/linux/fuse.h).
const (
	fuseOpInit   = 26
	fuseAsyncDIO = 1 << 15
	inHeaderLen  = 40 // len u32, opcode u32, unique u64, nodeid u64, uid, gid, pid u32, total_extlen u16, padding u16
	outHeaderLen = 16 // len u32, error i32, unique u64
	initFlagsOff = 12 // flags u32 after major, minor, max_readahead in fuse_init_in/out
	initBufSize  = 1<<20 + 8192
)

// startInitShim returns the shim; go-fuse must serve "/dev/fd/<theirs>".
func startInitShim(kfd int) (*initShim, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("creating the INIT socket pair: %w", err)
	}
	s := &initShim{kfd: kfd, mine: fds[0], theirs: fds[1], result: make(chan initResult, 1)}
	go func() { s.result <- s.run() }()
	return s, nil
}

func (s *initShim) run() initResult {
	// The kernel refuses reads smaller than a whole request may be.
	buf := make([]byte, initBufSize)
	n, err := readRetry(s.kfd, buf)
	if err != nil {
		return initResult{err: fmt.Errorf("reading INIT from /dev/fuse: %w", err)}
	}
	req := buf[:n]
	if n < inHeaderLen+initFlagsOff+4 || binary.LittleEndian.Uint32(req[4:]) != fuseOpInit {
		return initResult{err: fmt.Errorf("first fuse request is not INIT (%d bytes)", n)}
	}
	unique := binary.LittleEndian.Uint64(req[8:])
	offered := binary.LittleEndian.Uint32(req[inHeaderLen+initFlagsOff:])&fuseAsyncDIO != 0
	if _, err := unix.Write(s.mine, req); err != nil {
		return initResult{err: fmt.Errorf("passing INIT to go-fuse: %w", err)}
	}
	n, err = readRetry(s.mine, buf)
	if err != nil || n < outHeaderLen {
		return initResult{err: fmt.Errorf("reading go-fuse's INIT reply (%d bytes): %v", n, err)}
	}
	rep := buf[:n]
	if binary.LittleEndian.Uint64(rep[8:]) != unique {
		return initResult{err: errors.New("go-fuse's first reply is not to INIT")}
	}
	granted := false
	if offered && n >= outHeaderLen+initFlagsOff+4 && int32(binary.LittleEndian.Uint32(rep[4:])) == 0 {
		f := rep[outHeaderLen+initFlagsOff:]
		binary.LittleEndian.PutUint32(f, binary.LittleEndian.Uint32(f)|fuseAsyncDIO)
		granted = true
	}
	if _, err := unix.Write(s.kfd, rep); err != nil {
		return initResult{err: fmt.Errorf("writing the INIT reply to /dev/fuse: %w", err)}
	}
	return initResult{granted: granted}
}

func readRetry(fd int, buf []byte) (int, error) {
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}

// finish waits for the handshake, then puts /dev/fuse where go-fuse
// expects its descriptor. Call it after fuse.NewServer returned and before
// Serve. It reports whether FUSE_ASYNC_DIO was granted.
func (s *initShim) finish() (bool, error) {
	defer closeFd(&s.mine)
	var r initResult
	select {
	case r = <-s.result:
	case <-time.After(5 * time.Second):
		return false, errors.New("fuse INIT handshake did not finish within 5s")
	}
	if r.err != nil {
		return false, r.err
	}
	if err := unix.Dup3(s.kfd, s.theirs, unix.O_CLOEXEC); err != nil {
		return false, fmt.Errorf("handing /dev/fuse to go-fuse: %w", err)
	}
	closeFd(&s.kfd) // go-fuse's descriptor is now the only one
	return r.granted, nil
}

// abort closes the shim's descriptors after a failed mount, except theirs
// when go-fuse owns (and has closed) it. The caller still owns kfd unless
// finish succeeded.
func (s *initShim) abort(closeTheirs bool) {
	closeFd(&s.mine)
	if closeTheirs {
		closeFd(&s.theirs)
	}
}

// closeFd closes *fd once.
func closeFd(fd *int) {
	if *fd >= 0 {
		unix.Close(*fd)
		*fd = -1
	}
}
