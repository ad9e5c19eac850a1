package topology

import (
	"os"
	"syscall"
)

// nameByRdev maps a block device node with an unusual name to the kernel
// name of the device it refers to, via its device number.
func (r *Resolver) nameByRdev(p string) (string, bool) {
	fi, err := os.Stat(p)
	if err != nil || fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return "", false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	rdev := uint64(st.Rdev)
	// Linux dev_t encoding (see makedev(3)).
	major := int((rdev>>8)&0xfff | (rdev>>32)&^0xfff)
	minor := int(rdev&0xff | (rdev>>12)&^0xff)
	return r.nameByNumber(major, minor)
}
