// Package diskemu is the lab's emulated shared disk: a FUSE file system whose
// files are LUN images kept in a backing directory, and whose reads and writes
// are delayed as a disk array would delay them.
//
// The machine's own disk is too fast to saturate, so a storage-QoS experiment
// needs a slow, shared device whose latency rises when several consumers use
// it at once. Every READ and WRITE that reaches the mount is first submitted to
// a Model (normally internal/diskmodel's Array, or a fixed-service FIFO for
// calibration), then executed with pread/pwrite on the backing file, and the
// reply to the kernel is held back until the model's completion time. Each file
// owns its own region of the model's address space (like logical volumes
// striped over one volume group), so LUNs of different files seek against each
// other and queue on the same spindles.
//
// Files are opened with FOPEN_DIRECT_IO so the kernel page cache on top of the
// mount never hides the model. The lab attaches every image to its own loop
// device with direct I/O (losetup --direct-io=on), which makes /proc/diskstats
// report the emulated per-LUN latency. Go-fuse v2.7.2 does not negotiate
// FUSE_ASYNC_DIO, without which the kernel sends a loop device's direct I/O to
// FUSE one request at a time; asyncdio_linux.go grants it at INIT.
//
// Counters (requests, bytes, queue depth, mean service and latency) are
// available from (*Server).Stats and are rewritten once a second as JSON to
// Options.StatsPath (default BackingDir/.sanqos-diskemu-stats.json); names
// starting with "." in the backing directory are not shown in the mount.
package diskemu
