package daemon

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// RecordFile is the --record file, capped: a write that would take it past
// max renames it to path+".1" (replacing the previous one) and starts a
// new file, so the record never takes more than 2 × max on disk. The
// daemon writes one whole line per Write, so a rotation never splits one.
// Before, the record grew without bound (~0.5 GB a day with three
// consumers), often into RAM-backed /run.
type RecordFile struct {
	path string
	max  int64
	f    *os.File
	size int64
}

// recordMode is the record's mode: it names clients and their rates,
// which other local users have no business reading.
const recordMode = 0o640

// CreateRecordFile creates path, or empties it if it is a file of ours.
func CreateRecordFile(path string, max int64) (*RecordFile, error) {
	if max <= 0 {
		return nil, fmt.Errorf("record file %s: size cap %d must be positive", path, max)
	}
	f, err := openRecord(path)
	if err != nil {
		return nil, err
	}
	return &RecordFile{path: path, max: max, f: f}, nil
}

// openRecord opens path for writing and empties it, refusing what is not
// a plain file of its own: root writes the record, and with os.Create a
// symlink or hard link placed there (by whoever can write its directory)
// made root truncate and overwrite the file it points to. Nothing is
// truncated before the checks: O_NOFOLLOW refuses a symlink, and the
// open descriptor is checked, not the path.
func openRecord(path string) (*os.File, error) {
	// O_NONBLOCK: a FIFO placed there must not hang the start.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, recordMode)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("record file %s is a symlink; sanqos does not write through one: remove it, or give the real path", path)
	}
	if err != nil {
		return nil, fmt.Errorf("opening the record file: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("checking the record file %s: %w", path, err)
	}
	var refuse string
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		refuse = "is not a regular file"
	case st.Nlink != 1:
		refuse = fmt.Sprintf("has %d hard links (it would overwrite the others)", st.Nlink)
	case int(st.Uid) != os.Geteuid():
		refuse = fmt.Sprintf("belongs to uid %d, not to sanqos's uid %d", st.Uid, os.Geteuid())
	}
	if refuse != "" {
		f.Close()
		return nil, fmt.Errorf("record file %s %s: remove it (sanqos creates it, mode %04o), or give another path", path, refuse, recordMode)
	}
	if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
		f.Close()
		return nil, fmt.Errorf("opening the record file %s: %w", path, err)
	}
	// An earlier version made it 0644.
	if perm := os.FileMode(st.Mode) & os.ModePerm; perm&^recordMode != 0 {
		if err := f.Chmod(perm & recordMode); err != nil {
			f.Close()
			return nil, fmt.Errorf("making the record file %s private: %w", path, err)
		}
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("emptying the record file %s: %w", path, err)
	}
	return f, nil
}

// Write appends p, rotating first if p would pass the cap.
func (r *RecordFile) Write(p []byte) (int, error) {
	if r.size > 0 && r.size+int64(len(p)) > r.max {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

func (r *RecordFile) rotate() error {
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("closing the record %s to rotate it: %w", r.path, err)
	}
	if err := os.Rename(r.path, r.path+".1"); err != nil {
		return fmt.Errorf("rotating the record %s: %w", r.path, err)
	}
	f, err := openRecord(r.path)
	if err != nil {
		return fmt.Errorf("starting a new record: %w", err)
	}
	r.f, r.size = f, 0
	return nil
}

// Close closes the current file.
func (r *RecordFile) Close() error { return r.f.Close() }
