// Package diskemu is the lab's emulated shared disk: a FUSE file system whose
// files are LUN images kept in a backing directory, and whose reads and writes
// are delayed as a disk array would delay them.
//
// The machine's own disk is too fast to saturate, so a storage-QoS experiment
// needs a slow, shared device whose latency rises when several consumers use
// it at once. Every READ and WRITE that reaches the mount is first submitted
// to a Model (internal/sim/diskmodel's Array for "thesis-2010", "ssd" and "ram",
// or a fixed-service FIFO "fixed:5ms" for calibration), then executed with
// pread/pwrite on the backing file, and the reply to the kernel is held back
// until the model's completion time. Each file owns its own region of the
// model's address space (like LVs laid out on one VG), so LUNs of different
// files seek against each other and queue on the same spindles.
//
// The directory is flat: create, open, read, write, fsync (a real fsync of
// the backing file), truncate, fallocate, stat, unlink and readdir. Data is
// in the backing files as soon as a write is answered.
//
// # Arrangement with loop devices
//
// Files are opened with FOPEN_DIRECT_IO so the kernel page cache on top of
// the mount never hides the model. The lab attaches every image to its own
// loop device with direct I/O (losetup --direct-io=on -f --show IMAGE; check
// /sys/block/loopN/loop/dio is 1), and /proc/diskstats then shows the
// emulated per-LUN latency (TestLoopDirectIOLatency). For a loop device to
// pass its queue to the model, the connection needs FUSE_ASYNC_DIO, which
// go-fuse v2.7.2 does not negotiate; asyncdio_linux.go grants it during INIT
// (TestLoopQueueDepth: 8 requests in flight instead of 1).
//
// Replies are released by a timerfd-based waker (waker_linux.go) rather than
// Go timers, and Serve renices the process to ServeNice, because late
// replies on a CPU-loaded lab machine would otherwise add to every latency.
//
// # Counters
//
// (*Server).Stats returns requests, bytes, fsyncs, current and maximum queue
// depth, mean model service time, mean reply latency and mean backing I/O
// time, for the mount and per file. The same document is rewritten as JSON
// every second (atomically, by rename) to Options.StatsPath, by default
// BackingDir/.sanqos-diskemu-stats.json. Names starting with "." in the
// backing directory are the server's own and are not shown in the mount.
//
// # Running
//
// The lab starts `sanqos lab diskemu --mount DIR --backing DIR --profile
// thesis-2010`, which calls Serve until interrupted; tests use Mount and
// (*Server).Close. A stale mount of ours at the mountpoint (crashed server)
// is lazily unmounted first; any other mount there is an error. Close fails
// with a hint when loop devices still hold images (detach them first); the
// mount is then detached lazily and keeps working until the process exits.
package diskemu
