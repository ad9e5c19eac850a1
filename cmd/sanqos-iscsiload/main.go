// Command sanqos-iscsiload is the lab's fio-like iSCSI and NFS load
// generator. It speaks iSCSI itself through libiscsi (cgo), so it needs no
// kernel initiator, and it gives every I/O thread its own iSCSI session —
// its own TCP connection — so that the target can throttle, and the lab can
// measure, each thread separately. Each thread keeps one synchronous I/O in
// flight (fio's ioengine=sync, direct=1), or with --iodepth N keeps N
// outstanding through libiscsi's asynchronous API (async.go). With --nfs it speaks NFSv3
// through libnfs instead (nfs.go): the same jobs and logs, each thread
// with its own connection and its own file on the export.
//
// It writes one JSON line per second (internal/lab/iolog) and a final summary,
// and exits non-zero with one clear line when the target cannot be reached,
// refuses the login, lacks the LUN, an I/O fails or a verify finds damage.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
