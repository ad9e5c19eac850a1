package diskemu

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// TestInitShim plays the kernel on one socket pair and go-fuse on the shim's
// other end: the INIT reply reaching the "kernel" carries FUSE_ASYNC_DIO only
// when the kernel offered it, and nothing else in the reply changes.
func TestInitShim(t *testing.T) {
	for _, offered := range []bool{true, false} {
		kernel, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
		if err != nil {
			t.Fatal(err)
		}
		shim, err := startInitShim(kernel[1])
		if err != nil {
			t.Fatal(err)
		}
		// INIT request: header (unique 7) + major, minor, readahead, flags.
		req := make([]byte, inHeaderLen+16)
		binary.LittleEndian.PutUint32(req[0:], uint32(len(req)))
		binary.LittleEndian.PutUint32(req[4:], fuseOpInit)
		binary.LittleEndian.PutUint64(req[8:], 7)
		flags := uint32(1 | 1<<5) // ASYNC_READ | BIG_WRITES
		if offered {
			flags |= fuseAsyncDIO
		}
		binary.LittleEndian.PutUint32(req[inHeaderLen+initFlagsOff:], flags)
		if _, err := unix.Write(kernel[0], req); err != nil {
			t.Fatal(err)
		}
		// go-fuse side: read INIT, reply without ASYNC_DIO.
		buf := make([]byte, 4096)
		n, err := unix.Read(shim.theirs, buf)
		if err != nil || n != len(req) {
			t.Fatalf("go-fuse side read %d bytes, %v; want the %d-byte INIT", n, err, len(req))
		}
		rep := make([]byte, outHeaderLen+64)
		binary.LittleEndian.PutUint32(rep[0:], uint32(len(rep)))
		binary.LittleEndian.PutUint64(rep[8:], 7)
		binary.LittleEndian.PutUint32(rep[outHeaderLen:], 7)                   // major
		binary.LittleEndian.PutUint32(rep[outHeaderLen+initFlagsOff:], 1|1<<5) // go-fuse's flags
		binary.LittleEndian.PutUint32(rep[outHeaderLen+20:], 1<<20)            // max_write
		if _, err := unix.Write(shim.theirs, rep); err != nil {
			t.Fatal(err)
		}
		n, err = unix.Read(kernel[0], buf)
		if err != nil || n != len(rep) {
			t.Fatalf("kernel side read %d bytes, %v; want the %d-byte reply", n, err, len(rep))
		}
		got := binary.LittleEndian.Uint32(buf[outHeaderLen+initFlagsOff:])
		want := uint32(1 | 1<<5)
		if offered {
			want |= fuseAsyncDIO
		}
		if got != want {
			t.Errorf("offered=%v: reply flags %#x, want %#x", offered, got, want)
		}
		if mw := binary.LittleEndian.Uint32(buf[outHeaderLen+20:]); mw != 1<<20 {
			t.Errorf("max_write changed to %d", mw)
		}
		granted, err := shim.finish()
		if err != nil || granted != offered {
			t.Errorf("offered=%v: finish() = %v, %v", offered, granted, err)
		}
		// finish put the "kernel" descriptor where go-fuse reads: a request
		// written by the kernel now arrives there directly.
		unix.Write(kernel[0], []byte("after"))
		if n, _ := unix.Read(shim.theirs, buf); string(buf[:n]) != "after" {
			t.Errorf("after finish, go-fuse's descriptor read %q, want the kernel's message", buf[:n])
		}
		unix.Close(shim.theirs)
		unix.Close(kernel[0])
	}
}

// TestInitShimRejectsNonInit: the first request must be INIT.
func TestInitShimRejectsNonInit(t *testing.T) {
	kernel, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(kernel[0])
	shim, err := startInitShim(kernel[1])
	if err != nil {
		t.Fatal(err)
	}
	defer shim.abort(true)
	req := make([]byte, inHeaderLen+16)
	binary.LittleEndian.PutUint32(req[4:], 1) // LOOKUP
	unix.Write(kernel[0], req)
	if _, err := shim.finish(); err == nil {
		t.Fatal("finish accepted a first request that is not INIT")
	}
	unix.Close(kernel[1])
}
