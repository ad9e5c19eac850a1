package daemon

import (
	"fmt"
	"os"
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

// CreateRecordFile creates (truncates) path.
func CreateRecordFile(path string, max int64) (*RecordFile, error) {
	if max <= 0 {
		return nil, fmt.Errorf("record file %s: size cap %d must be positive", path, max)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &RecordFile{path: path, max: max, f: f}, nil
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
	f, err := os.Create(r.path)
	if err != nil {
		return fmt.Errorf("starting a new record %s: %w", r.path, err)
	}
	r.f, r.size = f, 0
	return nil
}

// Close closes the current file.
func (r *RecordFile) Close() error { return r.f.Close() }
