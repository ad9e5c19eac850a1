package vm

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// CPIOWriter writes a newc ("070701") archive, the format the kernel
// unpacks into its initramfs. Device nodes are skipped: the guest mounts
// devtmpfs. Hard links are written as separate copies, which the kernel
// accepts and which keeps the writer stateless.
type CPIOWriter struct {
	w   *bufio.Writer
	ino uint32
	n   int64 // bytes written, for padding
}

// NewCPIOWriter returns a writer on w; call Close to write the trailer.
func NewCPIOWriter(w io.Writer) *CPIOWriter {
	return &CPIOWriter{w: bufio.NewWriterSize(w, 1<<20), ino: 1}
}

func (c *CPIOWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return err
}

func (c *CPIOWriter) pad() error {
	if r := c.n % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}

// header writes one entry header and its name.
func (c *CPIOWriter) header(name string, mode uint32, size int64, mtime int64) error {
	c.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	h := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, uint32(mtime), uint32(size), 0, 0, 0, 0, len(name)+1, 0)
	if err := c.write([]byte(h)); err != nil {
		return err
	}
	if err := c.write(append([]byte(name), 0)); err != nil {
		return err
	}
	return c.pad()
}

// Dir adds a directory entry.
func (c *CPIOWriter) Dir(name string, perm fs.FileMode) error {
	return c.header(name, 0o040000|modeBits(perm), 0, 0)
}

// modeBits are the permission bits of m in the numeric form cpio stores,
// with setuid, setgid and sticky (which fs.FileMode keeps apart).
func modeBits(m fs.FileMode) uint32 {
	b := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

// File adds a regular file with the given content.
func (c *CPIOWriter) File(name string, perm fs.FileMode, data []byte) error {
	if err := c.header(name, 0o100000|uint32(perm.Perm()), int64(len(data)), 0); err != nil {
		return err
	}
	if err := c.write(data); err != nil {
		return err
	}
	return c.pad()
}

// CopyFile adds the regular file at src as name.
func (c *CPIOWriter) CopyFile(name, src string, perm uint32) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := c.header(name, 0o100000|perm, st.Size(), st.ModTime().Unix()); err != nil {
		return err
	}
	n, err := io.Copy(c.w, f)
	c.n += n
	if err != nil {
		return fmt.Errorf("copying %s into the archive: %w", src, err)
	}
	if n != st.Size() {
		return fmt.Errorf("copying %s into the archive: it changed size while being read", src)
	}
	return c.pad()
}

// Symlink adds a symbolic link.
func (c *CPIOWriter) Symlink(name, target string) error {
	if err := c.header(name, 0o120000|0o777, int64(len(target)), 0); err != nil {
		return err
	}
	if err := c.write([]byte(target)); err != nil {
		return err
	}
	return c.pad()
}

// AddTree adds everything under root, with names relative to it (prefix
// prepended), skipping device nodes, sockets and fifos, and any path for
// which skip returns true.
func (c *CPIOWriter) AddTree(root, prefix string, skip func(rel string) bool) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if skip != nil && skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		name := strings.TrimPrefix(filepath.Join(prefix, rel), "/")
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch m := info.Mode(); {
		case m.IsDir():
			return c.Dir(name, m)
		case m&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return c.Symlink(name, t)
		case m.IsRegular():
			return c.CopyFile(name, p, modeBits(m))
		}
		return nil // devices, fifos, sockets: the guest's devtmpfs has them
	})
}

// Close writes the trailer and flushes.
func (c *CPIOWriter) Close() error {
	if err := c.header("TRAILER!!!", 0, 0, 0); err != nil {
		return err
	}
	return c.w.Flush()
}
