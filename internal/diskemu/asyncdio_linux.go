package diskemu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Why a proxy: a loop device with direct I/O submits each request to the
// backing file as asynchronous direct I/O. FUSE keeps such a request
// asynchronous only if the server accepted FUSE_ASYNC_DIO at INIT; otherwise
// fuse_direct_IO() waits for the reply before the loop worker can submit the
// next request, so each loop device (one LUN) has at most one request in the
// array model, and a reader never queues behind a writer LUN's 4-12
// outstanding writes as it would on the thesis's RAID array. go-fuse v2.7.2
// masks FUSE_ASYNC_DIO out of its INIT reply and has no option for it.
//
// dioProxy sits between /dev/fuse and go-fuse: go-fuse serves one end of a
// SOCK_SEQPACKET socket pair (which, like /dev/fuse, keeps one message per
// read and write), the proxy copies messages both ways and sets the
// FUSE_ASYNC_DIO bit in the INIT reply when the kernel offered it. Cost: one
// extra copy of each message (measured in the package's benchmark test).
type dioProxy struct {
	kfd, sock int // /dev/fuse and the proxy's end of the socket pair
	log       *slog.Logger
	bufSize   int

	initDone chan bool // receives whether ASYNC_DIO was granted
	initMu   sync.Mutex
	initID   uint64 // unique of the INIT request, 0 until seen
	offered  bool

	wg   sync.WaitGroup
	once sync.Once
}

// FUSE wire constants (include/uapi/linux/fuse.h).
const (
	fuseOpInit     = 26
	fuseAsyncDIO   = 1 << 15
	inHeaderLen    = 40 // len u32, opcode u32, unique u64, nodeid u64, uid, gid, pid u32, total_extlen u16, padding u16
	outHeaderLen   = 16 // len u32, error i32, unique u64
	initFlagsOff   = 12 // flags u32 after major, minor, max_readahead in fuse_init_in/out
	maxHeaderSlack = 8192
)

// newDIOProxy starts the proxy for kfd and returns the descriptor go-fuse
// must serve.
func newDIOProxy(kfd, maxWrite int, log *slog.Logger) (*dioProxy, int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("creating the async-DIO proxy socket pair: %w", err)
	}
	p := &dioProxy{kfd: kfd, sock: fds[0], log: log, bufSize: maxWrite + maxHeaderSlack, initDone: make(chan bool, 1)}
	// A WRITE request carries up to maxWrite bytes in one message; the
	// default socket buffer (~200 KiB) would refuse it with EMSGSIZE.
	for _, fd := range fds {
		for _, opt := range []int{unix.SO_SNDBUFFORCE, unix.SO_RCVBUFFORCE} {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, 4*p.bufSize); err != nil {
				unix.Close(fds[0])
				unix.Close(fds[1])
				return nil, -1, fmt.Errorf("sizing the async-DIO proxy socket buffers: %w", err)
			}
		}
	}
	p.wg.Add(2)
	go p.toServer()
	go p.toKernel()
	return p, fds[1], nil
}

// toServer copies requests from the kernel to go-fuse until the connection
// ends (ENODEV after unmount).
func (p *dioProxy) toServer() {
	defer p.wg.Done()
	// The kernel needs room for a whole WRITE in every read.
	buf := make([]byte, p.bufSize)
	for {
		n, err := unix.Read(p.kfd, buf)
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOENT) {
				continue // ENOENT: the request was interrupted before we read it
			}
			if !errors.Is(err, unix.ENODEV) {
				p.log.Warn("reading /dev/fuse", "err", err)
			}
			break
		}
		msg := buf[:n]
		if n >= inHeaderLen && binary.LittleEndian.Uint32(msg[4:]) == fuseOpInit {
			p.initMu.Lock()
			p.initID = binary.LittleEndian.Uint64(msg[8:])
			if n >= inHeaderLen+initFlagsOff+4 {
				p.offered = binary.LittleEndian.Uint32(msg[inHeaderLen+initFlagsOff:])&fuseAsyncDIO != 0
			}
			p.initMu.Unlock()
		}
		if _, err := unix.Write(p.sock, msg); err != nil {
			p.log.Warn("passing a fuse request to the server", "err", err)
			break
		}
	}
	// Wake go-fuse's readers (they read 0 bytes and stop) and toKernel.
	unix.Shutdown(p.sock, unix.SHUT_RDWR)
}

// toKernel copies replies and notifications from go-fuse to the kernel.
func (p *dioProxy) toKernel() {
	defer p.wg.Done()
	buf := make([]byte, p.bufSize)
	for {
		n, err := unix.Read(p.sock, buf)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			p.log.Warn("reading a fuse reply from the server", "err", err)
			return
		}
		if n == 0 {
			return // shut down
		}
		msg := buf[:n]
		p.patchInit(msg)
		if _, err := unix.Write(p.kfd, msg); err != nil {
			switch {
			case errors.Is(err, unix.ENOENT):
				// The request was interrupted and is gone; go-fuse ignores this too.
			case errors.Is(err, unix.ENODEV), errors.Is(err, unix.EBADF):
				return
			default:
				p.log.Warn("writing a fuse reply to the kernel", "err", err)
			}
		}
	}
}

// patchInit sets FUSE_ASYNC_DIO in the reply to INIT, if the kernel offered it.
func (p *dioProxy) patchInit(msg []byte) {
	if len(msg) < outHeaderLen {
		return
	}
	p.initMu.Lock()
	id, offered := p.initID, p.offered
	p.initMu.Unlock()
	if id == 0 || binary.LittleEndian.Uint64(msg[8:]) != id {
		return
	}
	p.initMu.Lock()
	p.initID = 0
	p.initMu.Unlock()
	granted := false
	if offered && len(msg) >= outHeaderLen+initFlagsOff+4 && int32(binary.LittleEndian.Uint32(msg[4:])) == 0 {
		f := msg[outHeaderLen+initFlagsOff:]
		binary.LittleEndian.PutUint32(f, binary.LittleEndian.Uint32(f)|fuseAsyncDIO)
		granted = true
	}
	p.initDone <- granted
}

// shutdown stops both directions and waits for them.
func (p *dioProxy) shutdown() {
	p.once.Do(func() {
		unix.Shutdown(p.sock, unix.SHUT_RDWR)
		done := make(chan struct{})
		go func() { p.wg.Wait(); close(done) }()
		select {
		case <-done:
			unix.Close(p.sock)
			unix.Close(p.kfd)
		case <-time.After(2 * time.Second):
			// The kernel connection is still alive (a lazily detached
			// mount with open files): leave it to process exit.
			p.log.Warn("fuse connection still open after shutdown; leaving it to process exit")
		}
	})
}
