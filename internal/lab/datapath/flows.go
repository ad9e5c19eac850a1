package datapath

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// PingPong makes warm exchanges, then n timed ones, on a new connection,
// and returns the timed round trips and the retransmissions of both ends.
func (s *Server) PingPong(warm, n int) (rtt []time.Duration, retrans uint32, err error) {
	c, err := dial(modePing, rcvBuf)
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	buf := make([]byte, Msg)
	for i := range warm + n {
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			return nil, 0, fmt.Errorf("ping-pong exchange %d: %w", i, err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return nil, 0, fmt.Errorf("ping-pong exchange %d: %w", i, err)
		}
		if i >= warm {
			rtt = append(rtt, time.Since(t0))
		}
	}
	info, err := TCPInfo(c)
	if err != nil {
		return nil, 0, err
	}
	c.Close()
	srv, err := s.result()
	if err != nil {
		return nil, 0, err
	}
	return rtt, info.Total_retrans + srv.Total_retrans, nil
}

// BulkResult is one bulk flow: what the target sent and the CPU spent
// meanwhile.
type BulkResult struct {
	Segs, Retrans uint32 // the target's data segments sent, retransmissions
	Bytes         int64
	Wall          time.Duration
	CPU           CPUSpan
}

// BulkFlow runs a bulk flow from the target to the client for d and
// measures it; pid (0: none) is the daemon whose CPU it counts too.
func (s *Server) BulkFlow(d time.Duration, pid int) (BulkResult, error) {
	var r BulkResult
	m0, err := markCPU(pid)
	if err != nil {
		return r, err
	}
	start := time.Now()
	c, err := dial(modeBulk, rcvBuf)
	if err != nil {
		return r, err
	}
	defer c.Close()
	buf := make([]byte, 256<<10)
	for time.Since(start) < d {
		n, err := c.Read(buf)
		if err != nil {
			return r, fmt.Errorf("receiving the bulk flow: %w", err)
		}
		r.Bytes += int64(n)
	}
	c.(*net.TCPConn).CloseWrite()
	n, err := io.CopyBuffer(io.Discard, c, buf)
	if err != nil {
		return r, fmt.Errorf("receiving the bulk flow's end: %w", err)
	}
	r.Bytes += n
	c.Close()
	info, err := s.result()
	if err != nil {
		return r, err
	}
	r.Wall = time.Since(start)
	r.Segs, r.Retrans = info.Data_segs_out, info.Total_retrans
	m1, err := markCPU(pid)
	if err != nil {
		return r, err
	}
	r.CPU = m0.to(m1)
	return r, nil
}

// Upload sends from the client to the target as fast as it can for
// warm+d and returns the bytes per second the target received over the
// last d, and the client's retransmitted segments. The client's buffers
// are the kernel's autotuned ones, as a real initiator's are.
func (s *Server) Upload(warm, d time.Duration) (rate float64, retrans uint32, err error) {
	c, err := dial(modeUpload, 0)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	done := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		pinOneCPU()
		buf := make([]byte, 256<<10)
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			c.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := c.Write(buf); err != nil {
				done <- fmt.Errorf("uploading: %w", err)
				return
			}
		}
	}()
	time.Sleep(warm)
	b0, t0 := s.up.Load(), time.Now()
	time.Sleep(d)
	b1, el := s.up.Load(), time.Since(t0)
	close(stop)
	if err := <-done; err != nil {
		return 0, 0, err
	}
	info, err := TCPInfo(c)
	if err != nil {
		return 0, 0, err
	}
	return float64(b1-b0) / el.Seconds(), info.Total_retrans, nil
}

// pinOneCPU keeps the calling goroutine on one thread and that thread
// on one CPU, for good (the thread exits with the goroutine). veth hands
// each packet to the receive backlog of the CPU that sent it, so a
// sender that migrates between CPUs has its segments delivered out of
// order: over veth at 2–2.5 GB/s nearly every retransmission was a
// spurious one (DSACKed) after such reordering, thousands a second with
// or without sanqos, and they made any bulk ratio ±3–5 %.
func pinOneCPU() {
	runtime.LockOSThread()
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return
	}
	for cpu := range 1024 {
		if set.IsSet(cpu) {
			set.Zero()
			set.Set(cpu)
			_ = unix.SchedSetaffinity(0, &set)
			return
		}
	}
}

// RoundTrips runs EchoSize request/response exchanges on a new
// connection for d and returns them per second.
func (s *Server) RoundTrips(d time.Duration) (float64, error) {
	c, err := dial(modeEcho, 0)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	buf := make([]byte, EchoSize)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if _, err := c.Write(buf); err != nil {
			return 0, fmt.Errorf("round trip %d: %w", n, err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return 0, fmt.Errorf("round trip %d: %w", n, err)
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
