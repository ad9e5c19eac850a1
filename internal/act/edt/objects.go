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
	progName = "sanqos_edt_classify" // egress: departure times
	armName  = "sanqos_edt_arm"      // ingress: arming
	mapName  = "sanqos_edt"          // the daemon's entries
	stName   = "sanqos_edt_st"       // the programs' state per entry
	cntName  = "sanqos_edt_cnt"
	flowName = "sanqos_edt_flow" // the rise limit's per-flow ramps
	connName = "sanqos_edt_conn" // each connection's last departure time, for order
)

// Entry value layout (struct entry): seven little-endian u64s; the key
// (struct key) is the 16-byte address, the port in host order and
// padding.
const (
	offDelay    = 0  // ns added to now
	offExpires  = 8  // CLOCK_MONOTONIC ns after which the entry is ignored
	offSplit    = 16 // the port's small-segment split, TCP payload bytes
	offDir      = 24 // dirWrite | dirRead
	offArm      = 32 // armed write delay, ns
	offPermille = 40 // the rise limit's factor, per mille
	offStep     = 48 // the rise limit's step, ns
	valueSize   = 56
	stateSize   = 8 // struct state: armed_until
	keySize     = 24
	fkeySize    = 24 // struct fkey
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

// objects are the programs and their maps, loaded and not attached.
type objects struct {
	m, st, cnt, flow, conn *ebpf.Map
	prog, arm              *ebpf.Program
}

func (o objects) close() {
	for _, p := range []*ebpf.Program{o.prog, o.arm} {
		if p != nil {
			p.Close()
		}
	}
	for _, m := range []*ebpf.Map{o.m, o.st, o.cnt, o.flow, o.conn} {
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
	o := objects{m: coll.DetachMap(mapName), st: coll.DetachMap(stName), cnt: coll.DetachMap(cntName), flow: coll.DetachMap(flowName), conn: coll.DetachMap(connName),
		prog: coll.DetachProgram(progName), arm: coll.DetachProgram(armName)}
	coll.Close()
	if o.m == nil || o.st == nil || o.cnt == nil || o.flow == nil || o.conn == nil || o.prog == nil || o.arm == nil {
		o.close()
		return objects{}, fmt.Errorf("edt: the embedded object lacks one of %s, %s, %s, %s, %s, %s, %s", progName, armName, mapName, stName, cntName, flowName, connName)
	}
	return o, nil
}

// Rise is the rise limit of an entry's flows (package throttle's
// RiseLimit, in the integers the program computes with): a flow's delay
// rises per RTT sample to at most max(prev + prev·Permille/1000, prev +
// Step). The zero Rise does not limit.
type Rise struct {
	Permille uint64
	Step     time.Duration
}

// DefaultRise is throttle.DefaultRiseLimit: 10 % or 250 µs a sample.
var DefaultRise = Rise{Permille: 100, Step: 250 * time.Microsecond}

// Entry is what one initiator gets on one port.
type Entry struct {
	Split int           // the port's small-segment split, TCP payload bytes
	Dir   Direction     // the directions Delay holds
	Delay time.Duration // 0 with Armed: only armed
	// Armed, when not 0, holds the write direction at Armed for a second
	// after each segment longer than Split the initiator sends the port
	// (a write), where Dir does not hold it already.
	Armed time.Duration
	Rise  Rise
}

// set writes k's entry in m, and makes its state in st and its
// counters in cnt where it has none. The state (the arming's deadline)
// is the programs': set never writes an existing one, so a renewal does
// not end an activated arming.
func (o objects) set(k Key, en Entry, ttl time.Duration) error {
	if !k.Addr.IsValid() {
		return errors.New("edt: setting a delay: no address")
	}
	key := k.bytes()
	if err := o.st.Update(key, make([]byte, stateSize), ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		return fmt.Errorf("edt: making the state of %s port %d: %w", k.Addr, k.Port, err)
	}
	zero := make([]Counters, ebpf.MustPossibleCPU())
	if err := o.cnt.Update(key, zero, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		return fmt.Errorf("edt: making the counters of %s port %d: %w", k.Addr, k.Port, err)
	}
	d := uint64(dirWrite)
	switch en.Dir {
	case Read:
		d = dirRead
	case Both:
		d = dirWrite | dirRead
	}
	if en.Delay <= 0 {
		d = 0
	}
	v := make([]byte, valueSize)
	binary.LittleEndian.PutUint64(v[offDelay:], uint64(max(en.Delay, 0)))
	binary.LittleEndian.PutUint64(v[offExpires:], monotonic()+uint64(ttl.Nanoseconds()))
	binary.LittleEndian.PutUint64(v[offSplit:], uint64(max(en.Split, 0)))
	binary.LittleEndian.PutUint64(v[offDir:], d)
	binary.LittleEndian.PutUint64(v[offArm:], uint64(max(en.Armed, 0)))
	binary.LittleEndian.PutUint64(v[offPermille:], en.Rise.Permille)
	binary.LittleEndian.PutUint64(v[offStep:], uint64(max(en.Rise.Step, 0)))
	if err := o.m.Put(key, v); err != nil {
		return fmt.Errorf("edt: setting the delay of %s port %d: %w", k.Addr, k.Port, err)
	}
	return nil
}

// Counters are what the classifier counted for an initiator (struct
// counters): segments given a departure time, segments of its port
// passed at once (the other direction, an armed entry not activated, or
// the entry expired), segments the rise limit gave less than the
// requested delay (Limited; they are counted delayed or passed too), and
// segments passed at once because HeldLimit packets were held
// (Bypassed; counted passed too).
type Counters struct {
	Delayed  uint64
	Passed   uint64
	Limited  uint64
	Bypassed uint64
}

func (c *Counters) add(o Counters) {
	c.Delayed += o.Delayed
	c.Passed += o.Passed
	c.Limited += o.Limited
	c.Bypassed += o.Bypassed
}

// counters sums key's per-CPU counters.
func counters(cnt *ebpf.Map, key []byte) (Counters, error) {
	var per []Counters
	if err := cnt.Lookup(key, &per); err != nil {
		return Counters{}, err
	}
	var c Counters
	for _, p := range per {
		c.add(p)
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
			c.add(p)
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
		t.add(c)
	}
	return t, err
}

// forgetFlows removes the ramps of k's flows from the rise limit's
// memory, so that an initiator whose entry is freed ramps from 0 when it
// is delayed again, as nfqueue forgets a member 3 s after it left. Kept,
// a flow that went on sending undelayed would jump back to its old delay
// for up to RISE_FORGET (10 s), against an RTT estimate that has fallen:
// what the rise limit is there to prevent.
func (o objects) forgetFlows(k Key) error {
	key := k.bytes()
	var gone [][]byte
	var fk, v []byte
	it := o.flow.Iterate()
	for it.Next(&fk, &v) {
		if len(fk) >= fkeySize && bytes.Equal(fk[:16], key[:16]) && binary.NativeEndian.Uint16(fk[18:]) == k.Port {
			gone = append(gone, bytes.Clone(fk))
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("edt: listing the ramps of %s port %d: %w", k.Addr, k.Port, err)
	}
	for _, g := range gone {
		if err := o.flow.Delete(g); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("edt: forgetting a ramp of %s port %d: %w", k.Addr, k.Port, err)
		}
	}
	return nil
}
