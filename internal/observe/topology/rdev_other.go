//go:build !linux

package topology

// nameByRdev has no device numbers to go by off Linux (sysfs and dev_t
// encoding are Linux's): a node with an unusual name is not resolved. It
// exists so the pure packages that carry a topology (engine, sim) build on
// any GOOS.
func (r *Resolver) nameByRdev(string) (string, bool) { return "", false }
