//go:build linux

package edt

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
)

// bpfObject is bpf/edt.bpf.c compiled by `make bpf`.
//
//go:embed edt.bpf.o
var bpfObject []byte

// The object's names (bpf/edt.bpf.c).
const (
	progName = "sanqos_edt_classify"
	mapName  = "sanqos_edt"
	cntName  = "sanqos_edt_cnt"
)

// Map value layout (struct entry): five little-endian u64s; the key
// (struct key) is the 16-byte address, the port in host order and
// padding.
const (
	offDelay   = 0  // ns added to now
	offExpires = 8  // CLOCK_MONOTONIC ns after which the entry is ignored
	offLast    = 16 // last departure time given, for order
	offSplit   = 24 // the port's small-segment split, TCP payload bytes
	offDir     = 32 // dirWrite | dirRead
	valueSize  = 40
	keySize    = 24
)

// The entry's directions (DIR_WRITE, DIR_READ).
const (
	dirWrite = 1
	dirRead  = 2
)

// Key is one delay's place: the initiator's address and the target's
// port its flows use.
type Key struct {
	Addr netip.Addr
	Port uint16
}

// bytes is k as the map's key.
func (k Key) bytes() []byte {
	b := make([]byte, keySize)
	a := k.Addr.Unmap().As16()
	copy(b, a[:])
	binary.NativeEndian.PutUint16(b[16:], k.Port)
	return b
}

func keyFrom(b []byte) Key {
	return Key{Addr: netip.AddrFrom16([16]byte(b[:16])).Unmap(), Port: binary.NativeEndian.Uint16(b[16:])}
}

// objects are the classifier and its maps, loaded and not attached.
type objects struct {
	m, cnt *ebpf.Map
	prog   *ebpf.Program
}

func (o objects) close() {
	if o.prog != nil {
		o.prog.Close()
	}
	for _, m := range []*ebpf.Map{o.m, o.cnt} {
		if m != nil {
			m.Close()
		}
	}
}

// load loads the embedded object into the kernel; the verifier checks
// it here.
func load() (objects, error) {
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(bpfObject))
	if err != nil {
		return objects{}, fmt.Errorf("edt: parsing the embedded BPF object: %w", err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return objects{}, fmt.Errorf("edt: the kernel's verifier refused the classifier: %+v", ve)
		}
		return objects{}, fmt.Errorf("edt: loading the classifier: %w", err)
	}
	o := objects{m: coll.DetachMap(mapName), cnt: coll.DetachMap(cntName), prog: coll.DetachProgram(progName)}
	coll.Close()
	if o.m == nil || o.cnt == nil || o.prog == nil {
		o.close()
		return objects{}, fmt.Errorf("edt: the embedded object lacks %s, %s or %s", progName, mapName, cntName)
	}
	return o, nil
}

// set writes k's entry in m, keeping its last departure time, and makes
// its counters in cnt if it has none.
func set(m, cnt *ebpf.Map, k Key, split int, dir Direction, delay, ttl time.Duration) error {
	if !k.Addr.IsValid() {
		return errors.New("edt: setting a delay: no address")
	}
	key := k.bytes()
	v := make([]byte, valueSize)
	if old, err := m.LookupBytes(key); err == nil && old != nil {
		copy(v, old) // keep last: order across the change
	} else if cnt != nil {
		zero := make([]Counters, ebpf.MustPossibleCPU())
		if err := cnt.Update(key, zero, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("edt: making the counters of %s port %d: %w", k.Addr, k.Port, err)
		}
	}
	d := uint64(dirWrite)
	switch dir {
	case Read:
		d = dirRead
	case Both:
		d = dirWrite | dirRead
	}
	binary.LittleEndian.PutUint64(v[offDelay:], uint64(delay.Nanoseconds()))
	binary.LittleEndian.PutUint64(v[offExpires:], monotonic()+uint64(ttl.Nanoseconds()))
	binary.LittleEndian.PutUint64(v[offSplit:], uint64(max(split, 0)))
	binary.LittleEndian.PutUint64(v[offDir:], d)
	if err := m.Put(key, v); err != nil {
		return fmt.Errorf("edt: setting the delay of %s port %d: %w", k.Addr, k.Port, err)
	}
	return nil
}

// Counters are what the classifier counted for an initiator (struct
// counters): segments given a departure time, and segments of its port
// passed at once (the other direction, or the entry expired).
type Counters struct {
	Delayed uint64
	Passed  uint64
}

// counters sums key's per-CPU counters.
func counters(cnt *ebpf.Map, key []byte) (Counters, error) {
	var per []Counters
	if err := cnt.Lookup(key, &per); err != nil {
		return Counters{}, err
	}
	var c Counters
	for _, p := range per {
		c.Delayed += p.Delayed
		c.Passed += p.Passed
	}
	return c, nil
}

// Counters returns each delay's counters, summed over CPUs.
func (e *EDT) Counters() (map[Key]Counters, error) {
	out := map[Key]Counters{}
	key := make([]byte, keySize)
	var per []Counters
	it := e.cnt.Iterate()
	for it.Next(&key, &per) {
		var c Counters
		for _, p := range per {
			c.Delayed += p.Delayed
			c.Passed += p.Passed
		}
		out[keyFrom(key)] = c
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("edt: reading the counters: %w", err)
	}
	return out, nil
}

// Totals are the counters of every initiator since New, freed ones
// included.
func (e *EDT) Totals() (Counters, error) {
	per, err := e.Counters()
	e.mu.Lock()
	t := e.freed
	e.mu.Unlock()
	for _, c := range per {
		t.Delayed += c.Delayed
		t.Passed += c.Passed
	}
	return t, err
}
