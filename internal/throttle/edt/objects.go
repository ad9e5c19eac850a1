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

// Map value layout (struct entry): five little-endian u64s.
const (
	offDelay   = 0  // ns added to now
	offExpires = 8  // CLOCK_MONOTONIC ns after which the entry is ignored
	offLast    = 16 // last departure time given, for order
	offMinLen  = 24 // IP total length range the delay applies to
	offMaxLen  = 32
	valueSize  = 40
	keySize    = 16
)

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

// keyOf is addr's map key: its 16-byte form (IPv4 as ::ffff:a.b.c.d).
func keyOf(addr netip.Addr) [keySize]byte {
	return addr.Unmap().As16()
}

// set writes addr's entry in m, keeping its last departure time, and
// makes its counters in cnt if it has none.
func set(m, cnt *ebpf.Map, addr netip.Addr, dir Direction, delay, ttl time.Duration) error {
	if !addr.IsValid() {
		return errors.New("edt: setting a delay: no address")
	}
	key := keyOf(addr)
	v := make([]byte, valueSize)
	if old, err := m.LookupBytes(key[:]); err == nil && old != nil {
		copy(v, old) // keep last: order across the change
	} else if cnt != nil {
		zero := make([]Counters, ebpf.MustPossibleCPU())
		if err := cnt.Update(key[:], zero, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("edt: making the counters of %s: %w", addr, err)
		}
	}
	binary.LittleEndian.PutUint64(v[offDelay:], uint64(delay.Nanoseconds()))
	binary.LittleEndian.PutUint64(v[offExpires:], monotonic()+uint64(ttl.Nanoseconds()))
	lo, hi := uint64(0), uint64(smallMax)
	switch dir {
	case Read:
		lo, hi = smallMax+1, 65535
	case Both:
		hi = 65535
	}
	binary.LittleEndian.PutUint64(v[offMinLen:], lo)
	binary.LittleEndian.PutUint64(v[offMaxLen:], hi)
	if err := m.Put(key[:], v); err != nil {
		return fmt.Errorf("edt: setting the delay of %s: %w", addr, err)
	}
	return nil
}

// Counters are what the classifier counted for an initiator (struct
// counters): packets given a departure time, and packets to it passed at
// once (another length than its entry's, or the entry expired).
type Counters struct {
	Delayed uint64
	Passed  uint64
}

// counters sums key's per-CPU counters.
func counters(cnt *ebpf.Map, key [keySize]byte) (Counters, error) {
	var per []Counters
	if err := cnt.Lookup(key[:], &per); err != nil {
		return Counters{}, err
	}
	var c Counters
	for _, p := range per {
		c.Delayed += p.Delayed
		c.Passed += p.Passed
	}
	return c, nil
}

// Counters returns each delayed initiator's counters, summed over CPUs.
func (e *EDT) Counters() (map[netip.Addr]Counters, error) {
	out := map[netip.Addr]Counters{}
	var key [keySize]byte
	var per []Counters
	it := e.cnt.Iterate()
	for it.Next(&key, &per) {
		var c Counters
		for _, p := range per {
			c.Delayed += p.Delayed
			c.Passed += p.Passed
		}
		out[netip.AddrFrom16(key).Unmap()] = c
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
