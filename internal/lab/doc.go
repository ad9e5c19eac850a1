// Package lab builds, on one Linux machine, the five-server iSCSI testbed of
// the thesis sanqos rebuilds: a target namespace (sanqos-bm) running tgtd,
// four initiator namespaces (sanqos-b2 … sanqos-b5) joined by a bridge that
// lives in its own namespace (sanqos-sw, so the host's network is never
// touched), and one LUN per initiator whose image sits on shared storage and
// is attached to its own loop device with direct I/O, so /proc/diskstats
// shows each LUN's real latency as the thesis's dm devices did.
//
// With Options.NFS the target namespace also runs nfs-ganesha and rpcbind
// (nfs.go), each with a /run of its own, exporting NFSv3 over TCP from an
// ext4 file system on one more loop device of the same storage, which
// every initiator's NFS client shares.
//
// Everything the lab creates carries a sanqos-lab / sanqos-b* prefix and is
// recorded in /run/sanqos-lab; Cleanup removes it whether or not the lab
// that created it is still running, so a crashed run never leaves the
// machine dirty. There is one lab per machine: a Lab holds a lock until
// Down, so tests of several packages wait for each other instead of
// clearing each other's lab.
//
// Go callers (experiments, end-to-end tests):
//
//	l, err := lab.Up(ctx, lab.Options{Storage: lab.DefaultStorage, Loadgen: path})
//	if err != nil { … }
//	defer l.Down()
//	for _, in := range l.Initiators() { … in.NS, in.IP, in.IQN, in.Loop … }
//	cmd, err := l.LoadCommand(ctx, "b2", "--job", "smalljob", "--runtime", "20s", "--time-based")
//	// its stdout is iolog lines; lab.Command(ctx, lab.TargetNS, "sanqos", "run", …)
package lab
