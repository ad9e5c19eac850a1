// Package wire counts, per client address, the bytes each client sends
// to the storage ports and receives from them, from the kernel's own
// per-socket counters (sock_diag), with nothing on the packet path: the
// attribution of writes to clients when the device cannot tell (see
// Wire). It is no backend: it delays nothing and runs beside any of
// them; the daemon opens it through throttle.OpenWire.
package wire
