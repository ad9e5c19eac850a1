// Package nfqbackend is the nfqueue backend, the daemon's default data
// path: iptables sends the packets a throttled consumer receives from
// the target ports to an NFQUEUE, and one real-time packet thread holds
// each for the delay of its direction and gives its verdict (see
// Nfqueue). Here are its lifecycle and rules (nfqueue.go), who is queued
// and the delay table (members.go, classes.go), the arming of returning
// writers (arm.go), the packet thread (packetloop.go), the standby that
// takes over while its CPU is stalled (standby.go), the commands the
// control loop runs on it (commands.go) and the threads' real-time
// placement (rt*.go).
//
// It is one of the parts package throttle, the facade the daemon
// imports, is built from: throttle opens it (throttle.Open), and it
// never imports throttle. The delayer it drives is package packetpath;
// the kernel objects it owns are package owned's.
//
// Its tests include the live lab (lab_test.go): a pair of network
// namespaces with real servers. The live tests of the other backends
// and of the daemon binary run on it too, here, because the nfqueue
// backend's own reach into its internals and a _test.go rig cannot be
// shared between packages.
package nfqbackend
