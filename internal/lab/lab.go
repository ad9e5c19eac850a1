package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// DefaultSize is each LUN image's size: larger than anything an experiment
// writes (the thesis's interference jobs wrote 2 GiB per thread, we scale
// by time instead), sparse so it costs only what is written.
const DefaultSize = 2 << 30

// DefaultStorage is the emulated disk calibrated to the thesis.
var DefaultStorage = Storage{Kind: "emu", Profile: "thesis-2010"}

// Options configure Up.
type Options struct {
	// Storage is where LUN images live; zero means DefaultStorage.
	Storage Storage
	// Size of each LUN image in bytes; 0 means DefaultSize.
	Size int64
	// Seed of the emulated disk's random numbers.
	Seed int64
	// EmuCommand runs the emulated disk as a process of its own (argv
	// prefix; --mount, --backing, --profile and --seed are appended), as
	// `sanqos lab up` must so the lab outlives it. Empty: the disk is
	// served inside this process and lives as long as the Lab value.
	EmuCommand []string
	// Loadgen is the path of sanqos-iscsiload; empty: FindLoadgen.
	Loadgen string
	// NFS adds the NFS target (nfs.go): nfs-ganesha and rpcbind in the
	// target namespace, exporting ext4 on a loop device of the storage.
	NFS bool
	// NFSDirtyBytes caps the NFS export device's dirty page cache
	// (limitDirty); 0 leaves the kernel's default.
	NFSDirtyBytes int64
	// Progress receives one line per phase; nil discards them.
	Progress io.Writer
}

// Initiator is one initiator host of the lab and the LUN it owns.
type Initiator struct {
	Name  string     `json:"name"`      // b2 … b5
	NS    string     `json:"namespace"` // sanqos-b2 …
	IP    netip.Addr `json:"ip"`
	IQN   string     `json:"target_iqn"` // the target it may log in to
	Loop  string     `json:"loop"`       // loop device serving the LUN, e.g. loop3
	Image string     `json:"image"`      // LUN image the loop device is over
}

// Target is the iSCSI target of the lab.
type Target struct {
	NS          string     `json:"namespace"`
	IP          netip.Addr `json:"ip"`
	Port        int        `json:"port"`
	ControlPort int        `json:"control_port"` // tgtadm -C
}

// Portal is the target's address:port, as initiators dial it.
func (t Target) Portal() string { return netip.AddrPortFrom(t.IP, uint16(t.Port)).String() }

// State is what a running lab is made of; Up records it in
// /run/sanqos-lab/state.json, and Status and Cleanup read it back.
type State struct {
	Started    time.Time   `json:"started"`
	Storage    Storage     `json:"storage"`
	Size       int64       `json:"size_bytes"`
	Target     Target      `json:"target"`
	Initiators []Initiator `json:"initiators"`
	Bridge     string      `json:"bridge"`
	MTU        int         `json:"mtu"`
	Offloads   Offloads    `json:"offloads"`
	// TCPCongestionControl is what every lab host's TCP uses.
	TCPCongestionControl string `json:"tcp_congestion_control"`
	// EmuMount is the emulated disk's mount point ("" for dir storage).
	EmuMount string `json:"emu_mount,omitempty"`
	// NFS is the NFS target (nil: the lab has none).
	NFS *NFS `json:"nfs,omitempty"`
}

// Lab is a running lab.
type Lab struct {
	st      State
	loadgen string
	r       runner

	stopEmuOnce sync.Once
	stopEmu     func() // stops an emulated disk served in this process

	lock *labLock // held until Down
}

// host is a namespace with an address on the lab network.
type host struct {
	ns   string
	addr netip.Addr
}

// checkEnv returns the one error a user should see before anything is
// touched: not root, or a missing tool.
func checkEnv(nfs bool) error {
	if os.Geteuid() != 0 {
		return errors.New("the lab creates network namespaces, loop devices and mounts: run it as root")
	}
	if err := checkTools(exec.LookPath); err != nil {
		return err
	}
	if nfs {
		return checkNFSEnv(exec.LookPath)
	}
	return nil
}

// progress prints phase lines with an estimate of the time left.
type progress struct {
	w      io.Writer
	phases []phase
	i      int
}

type phase struct {
	name string
	est  time.Duration
}

func (p *progress) next() {
	if p.w == nil {
		return
	}
	var left time.Duration
	for _, ph := range p.phases[p.i:] {
		left += ph.est
	}
	fmt.Fprintf(p.w, "lab up: [%d/%d] %s (about %s left)\n", p.i+1, len(p.phases), p.phases[p.i].name, left.Round(time.Second))
	p.i++
}

// Up builds the lab after clearing whatever a crashed run left. On error
// (and on ctx cancellation) it removes what it created.
func Up(ctx context.Context, opts Options) (l *Lab, err error) {
	if err := checkEnv(opts.NFS); err != nil {
		return nil, err
	}
	if opts.Storage.Kind == "" {
		opts.Storage = DefaultStorage
	}
	if opts.Size == 0 {
		opts.Size = DefaultSize
	}
	lk, err := lock(ctx, opts.Progress)
	if err != nil {
		return nil, err
	}
	r := execRunner{}
	l = &Lab{r: r, lock: lk}
	pr := &progress{w: opts.Progress, phases: []phase{
		{"clearing leftovers of earlier runs", time.Second},
		{"network namespaces and bridge", 2 * time.Second},
		{"storage " + opts.Storage.String(), time.Second},
		{"loop devices with direct I/O", time.Second},
		{"tgtd and targets", time.Second},
	}}
	if opts.NFS {
		pr.phases[2].est += 6 * time.Second // laying out the export's files
		pr.phases = append(pr.phases, phase{"nfs-ganesha and rpcbind", 3 * time.Second})
	}

	pr.next()
	if err := cleanup(ctx, r, nil); err != nil {
		lk.release()
		return nil, fmt.Errorf("clearing an earlier lab: %w", err)
	}
	defer func() {
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("interrupted while bringing the lab up (%w); what it had created is removed", ctx.Err())
			}
			if cerr := l.Down(); cerr != nil {
				err = fmt.Errorf("%w (and cleaning up: %v)", err, cerr)
			}
			l = nil
		}
	}()
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return l, fmt.Errorf("creating state directory: %w", err)
	}
	hosts, err := l.plan(opts)
	if err != nil {
		return l, err
	}
	for _, step := range []func() error{
		func() error { return l.network(ctx, hosts) },
		func() error { return l.storage(ctx, opts) },
		func() error { return l.loops(ctx) },
		func() error { return l.targets(ctx) },
		func() error { return l.nfs(ctx) },
	} {
		if pr.i < len(pr.phases) { // without NFS its step has no phase
			pr.next()
		}
		if err := step(); err != nil {
			return l, err
		}
	}
	l.loadgen = opts.Loadgen
	if opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "lab up: ready: target %s, %d initiators, storage %s\n",
			l.st.Target.Portal(), len(l.st.Initiators), l.st.Storage)
	}
	return l, nil
}

// plan records the lab's addresses and names in its state before
// anything is created, so that a clean-up knows what to look for.
func (l *Lab) plan(opts Options) ([]host, error) {
	st := &l.st
	st.Started = time.Now().UTC()
	st.Storage, st.Size = opts.Storage, opts.Size
	st.Bridge, st.MTU = bridgeName, MTU
	st.Target = Target{NS: TargetNS, IP: TargetAddr, Port: ISCSIPort, ControlPort: ControlPort}
	if opts.NFS {
		st.NFS = &NFS{Export: nfsExportDir(), URL: nfsURL(TargetAddr, nfsExportDir()), Port: NFSPort, Config: ganeshaConfPath(),
			DirtyBytes: opts.NFSDirtyBytes}
	}
	hosts := []host{{TargetNS, TargetAddr}}
	for i, n := range initiatorNames {
		in := Initiator{Name: n, NS: "sanqos-" + n, IP: initiatorAddr(i), IQN: IQNPrefix + n}
		st.Initiators = append(st.Initiators, in)
		hosts = append(hosts, host{in.NS, in.IP})
	}
	return hosts, writeState(st)
}

// network creates the namespaces and the bridge and reads what the
// target's interface offloads and which congestion control it uses.
func (l *Lab) network(ctx context.Context, hosts []host) (err error) {
	st := &l.st
	if err := setupNetwork(ctx, l.r, hosts); err != nil {
		return err
	}
	if st.Offloads, err = readOffloads(ctx, l.r, TargetNS, ifName); err != nil {
		return err
	}
	st.TCPCongestionControl, err = readCongestionControl(ctx, l.r, TargetNS)
	return err
}

// storage creates the LUN images, behind the emulated disk or in a
// directory, and records them before anything can fail on them.
func (l *Lab) storage(ctx context.Context, opts Options) error {
	st := &l.st
	imageDir := opts.Storage.Dir
	if opts.Storage.Kind == "emu" {
		if opts.Storage.Memory {
			size := int64(len(st.Initiators)) * opts.Size
			if st.NFS != nil {
				size += nfsImageSize
			}
			if err := mountMemoryBacking(size); err != nil {
				return err
			}
		}
		for _, in := range st.Initiators {
			if err := createImage(filepath.Join(emuBackingDir(), imageName(in.Name)), opts.Size); err != nil {
				return err
			}
		}
		if err := l.prepareNFS(ctx, emuBackingDir()); err != nil {
			return err
		}
		if err := l.startEmu(ctx, opts); err != nil {
			return err
		}
		st.EmuMount = emuMountpoint()
		imageDir = st.EmuMount
	}
	for i := range st.Initiators {
		in := &st.Initiators[i]
		in.Image = filepath.Join(imageDir, imageName(in.Name))
		if opts.Storage.Kind == "dir" {
			if err := createImage(in.Image, opts.Size); err != nil {
				return err
			}
		}
	}
	if opts.Storage.Kind == "dir" {
		if err := l.prepareNFS(ctx, imageDir); err != nil {
			return err
		}
	}
	if st.NFS != nil {
		st.NFS.Image = filepath.Join(imageDir, nfsImageName)
	}
	return writeState(st)
}

// prepareNFS makes the NFS export's image in dir (where the storage
// keeps its files), when the lab has an NFS target.
func (l *Lab) prepareNFS(ctx context.Context, dir string) error {
	if l.st.NFS == nil {
		return nil
	}
	return prepareNFSImage(ctx, l.r, filepath.Join(dir, nfsImageName), nfsLayout(l.st.Initiators))
}

// nfs mounts the export and starts ganesha and rpcbind, when the lab has
// an NFS target.
func (l *Lab) nfs(ctx context.Context) error {
	n := l.st.NFS
	if n == nil {
		return nil
	}
	if err := mountExport(n.Loop); err != nil {
		return err
	}
	if err := limitDirty("/sys", n.Loop, n.DirtyBytes); err != nil {
		return err
	}
	if err := startNFS(ctx, l.r); err != nil {
		return err
	}
	return writeState(&l.st)
}

// loops attaches every image to a loop device with direct I/O.
func (l *Lab) loops(ctx context.Context) (err error) {
	for i := range l.st.Initiators {
		in := &l.st.Initiators[i]
		if in.Loop, err = attachLoop(ctx, l.r, "/sys", in.Image); err != nil {
			return err
		}
	}
	if n := l.st.NFS; n != nil {
		if n.Loop, err = attachLoop(ctx, l.r, "/sys", n.Image); err != nil {
			return err
		}
	}
	return writeState(&l.st)
}

// targets starts tgtd and configures a target per initiator.
func (l *Lab) targets(ctx context.Context) error {
	if err := startTgtd(ctx, l.r); err != nil {
		return err
	}
	if err := configureTargets(ctx, l.r, l.st.Initiators); err != nil {
		return err
	}
	return writeState(&l.st)
}

// Down removes the lab (see Cleanup) and lets others use the machine's lab.
func (l *Lab) Down() error {
	stop := func() {}
	if l.stopEmu != nil {
		stop = func() { l.stopEmuOnce.Do(l.stopEmu) }
	}
	err := cleanup(context.Background(), l.r, stop)
	l.lock.release()
	return err
}

// Release lets go of the lab without removing it, so that it outlives
// this process (`sanqos lab up`); the next Up or Cleanup removes it.
func (l *Lab) Release() { l.lock.release() }

// Initiators are the lab's initiators, b2 first.
func (l *Lab) Initiators() []Initiator {
	return append([]Initiator(nil), l.st.Initiators...)
}

// Initiator returns one initiator by name ("b2" or "sanqos-b2").
func (l *Lab) Initiator(name string) (Initiator, error) {
	return findInitiator(l.st.Initiators, name)
}

func findInitiator(inits []Initiator, name string) (Initiator, error) {
	var names []string
	for _, in := range inits {
		if in.Name == name || in.NS == name {
			return in, nil
		}
		names = append(names, in.Name)
	}
	return Initiator{}, fmt.Errorf("no initiator %q in the lab (have %s)", name, strings.Join(names, ", "))
}

// Target is the lab's iSCSI target.
func (l *Lab) Target() Target { return l.st.Target }

// State is the complete description of the lab.
func (l *Lab) State() State { return l.st }

// Command returns a command that runs argv inside a lab namespace.
func Command(ctx context.Context, ns string, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
}

// LoadCommand returns the load generator, ready to start in the
// initiator's namespace against its own target; args are the load
// generator's job flags (see sanqos-iscsiload --help).
func (l *Lab) LoadCommand(ctx context.Context, initiator string, args ...string) (*exec.Cmd, error) {
	in, err := l.Initiator(initiator)
	if err != nil {
		return nil, err
	}
	return l.loadCommand(ctx, initiator, []string{"--portal", l.st.Target.Portal(), "--target", in.IQN}, args)
}

// loadCommand is the load generator in the initiator's namespace with
// the target's flags, then the job's.
func (l *Lab) loadCommand(ctx context.Context, initiator string, target, args []string) (*exec.Cmd, error) {
	in, err := l.Initiator(initiator)
	if err != nil {
		return nil, err
	}
	bin := l.loadgen
	if bin == "" {
		if bin, err = FindLoadgen(); err != nil {
			return nil, err
		}
	}
	argv := append(append([]string{bin}, target...), args...)
	return Command(ctx, in.NS, argv...), nil
}

// LoadgenName is the load generator's binary (cmd/sanqos-iscsiload).
const LoadgenName = "sanqos-iscsiload"

// FindLoadgen looks for sanqos-iscsiload next to the running executable,
// then in PATH.
func FindLoadgen() (string, error) { return findSibling(LoadgenName) }

// DaemonName is the daemon's binary (cmd/sanqos), which the lab runs
// as the daemon under test.
const DaemonName = "sanqos"

// FindDaemon looks for the sanqos daemon next to the running executable
// (sanqos-lab), then in PATH.
func FindDaemon() (string, error) { return findSibling(DaemonName) }

// findSibling finds a binary of this build: next to the running
// executable first, so that a fresh build is tested together, then in PATH.
func findSibling(name string) (string, error) {
	self, err := os.Executable()
	if err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found next to %s or in PATH: run 'make build'", name, self)
}

func writeState(st *State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding lab state: %w", err)
	}
	tmp := stateFile() + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing lab state: %w", err)
	}
	if err := os.Rename(tmp, stateFile()); err != nil {
		return fmt.Errorf("writing lab state: %w", err)
	}
	return nil
}

// readState reads the recorded state; nil without error when there is no lab.
func readState() (*State, error) {
	b, err := os.ReadFile(stateFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading lab state: %w", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", stateFile(), err)
	}
	return &st, nil
}
