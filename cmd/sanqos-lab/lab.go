package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/sanqos/sanqos/internal/lab"
)

// labCommands are the subcommands of 'sanqos lab'; diskemu is hidden: lab
// up runs it as the emulated disk's own process.
var labCommands = []struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}{
	{"up", "build the lab: namespaces, bridge, LUN images, loop devices, tgtd", cmdLabUp},
	{"status", "show the lab and whether anything is missing", cmdLabStatus},
	{"down", "remove everything the lab created (safe to repeat)", cmdLabDown},
	{"run", "run one experiment in a fresh lab and write its report", labRun},          // labexp.go
	{"demo", "write the demonstration report (simulation and lab)", labDemo},           // labexp.go
	{"soak", "run the fig5.11 workload for long and fail on daemon growth", labSoak},   // labsoak.go
	{"vm", "boot Debian's kernel under qemu, run kernel-stack tests inside", cmdLabVM}, // labvm.go
	{"sim", "run the deterministic simulation (also 'sanqos sim')", cmdSim},            // sim.go
}

func labUsage(w io.Writer) {
	fmt.Fprintf(w, `Usage: sanqos lab <command> [flags]

The lab rebuilds the thesis's five-server iSCSI testbed on this machine (as
root): a target namespace %s running tgtd (control port %d), initiator
namespaces sanqos-b2 … sanqos-b5 on a bridge in %s, and one LUN per
initiator on shared storage, each on its own loop device with direct I/O.

Commands:
`, lab.TargetNS, lab.ControlPort, lab.SwitchNS)
	for _, c := range labCommands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'sanqos lab <command> --help' for the flags of a command. The lab is the\nseparate binary sanqos-lab; 'sanqos lab' hands over to it.\n")
}

func cmdLab(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		labUsage(stderr)
		return errUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		labUsage(stdout)
		return errHelp
	case "diskemu":
		return cmdLabDiskemu(ctx, args[1:], stdout, stderr)
	}
	for _, c := range labCommands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "sanqos lab: unknown command %q\n\n", args[0])
	labUsage(stderr)
	return errUsage
}

func cmdLabUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab up", "sanqos lab up [--profile thesis-2010] [--storage emu:PROFILE|emu-mem:PROFILE|dir:PATH] [--size 2GiB] [--nfs]",
		`Build the lab, after removing whatever an earlier run left. LUN images are
sparse files on the emulated disk (a FUSE file system over a disk model,
default) or in a directory on real storage (dir:PATH, whose file system must
support O_DIRECT). The lab stays up until 'sanqos lab down'.`, stderr)
	profile := fs.String("profile", lab.DefaultStorage.Profile, "disk model of the emulated disk (thesis-2010, ssd, ram)")
	storage := fs.String("storage", "", "where LUN images live: emu:PROFILE (the emulated disk), emu-mem:PROFILE (its backing files in RAM, for profiles faster than this machine's disk) or dir:PATH (default emu:<profile>, emu-mem:ssd for ssd)")
	size := fs.String("size", "2GiB", "size of each LUN image (sparse)")
	seed := fs.Int64("seed", 1, "seed of the emulated disk's random numbers")
	nfs := fs.Bool("nfs", false, "also an NFS target: nfs-ganesha and rpcbind in the target namespace, NFSv3 on port 2049, exporting ext4 on a loop device of the storage")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	opts, err := labOptions(*profile, *storage, *size, *seed, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "sanqos lab up: %v\n", err)
		return errUsage
	}
	opts.NFS = *nfs
	l, err := lab.Up(ctx, opts)
	if err != nil {
		return err
	}
	l.Release() // the lab stays up after this command
	printLab(stdout, l.State())
	fmt.Fprintf(stdout, "\nRemove it with 'sanqos lab down'.\n")
	return nil
}

// labOptions turns the flags of up and run into lab options.
func labOptions(profile, storage, size string, seed int64, progress io.Writer) (lab.Options, error) {
	st := lab.DefaultStorageFor(profile)
	if storage != "" {
		var err error
		if st, err = lab.ParseStorage(storage); err != nil {
			return lab.Options{}, err
		}
	}
	n, err := lab.ParseSize(size)
	if err != nil {
		return lab.Options{}, err
	}
	self, err := os.Executable()
	if err != nil {
		return lab.Options{}, fmt.Errorf("finding the sanqos executable: %w", err)
	}
	return lab.Options{
		Storage:    st,
		Size:       n,
		Seed:       seed,
		EmuCommand: []string{self, "diskemu"},
		Progress:   progress,
	}, nil
}

func printLab(w io.Writer, st lab.State) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "target\t%s\t%s\tcontrol port %d\n", st.Target.NS, st.Target.Portal(), st.Target.ControlPort)
	fmt.Fprintf(tw, "storage\t%s\t%s per LUN\t\n", st.Storage, humanBytes(st.Size))
	fmt.Fprintf(tw, "network\tbridge %s\tMTU %d\ttso %v gso %v gro %v, tcp %s\n", st.Bridge, st.MTU, st.Offloads.TSO, st.Offloads.GSO, st.Offloads.GRO, st.TCPCongestionControl)
	fmt.Fprintf(tw, "\nINITIATOR\tNAMESPACE\tIP\tTARGET\tLOOP\tIMAGE\n")
	for _, in := range st.Initiators {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", in.Name, in.NS, in.IP, in.IQN, in.Loop, in.Image)
	}
	if n := st.NFS; n != nil {
		fmt.Fprintf(tw, "\nNFS\t%s\tport %d\t%s\t%s\t%s\n", n.URL, n.Port, n.Config, n.Loop, n.Image)
	}
	tw.Flush()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}

func cmdLabStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab status", "sanqos lab status [--json]",
		"Show the lab recorded in "+lab.StateDir+" and check it against the machine.", stderr)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, err := lab.ReadStatus(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	switch {
	case s.State == nil && len(s.Problems) == 0:
		fmt.Fprintln(stdout, "no lab is up; start one with 'sanqos lab up'")
		return nil
	case s.State != nil:
		printLab(stdout, *s.State)
		fmt.Fprintf(stdout, "\ntgtd pid %d, %d targets, up since %s\n", s.TgtdPid, s.Targets, s.State.Started.Format("15:04:05 MST"))
	}
	if len(s.Problems) > 0 {
		fmt.Fprintf(stdout, "\nproblems (repair with 'sanqos lab down' then 'sanqos lab up'):\n  %s\n", strings.Join(s.Problems, "\n  "))
		return errors.New("the lab is not healthy")
	}
	return nil
}

func cmdLabDown(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab down", "sanqos lab down",
		`Remove everything the lab created: processes in its namespaces, tgtd, the
emulated disk, loop devices, mounts, the namespaces (with their interfaces
and rules), LUN images and `+lab.StateDir+`. Safe to repeat.`, stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("removing the lab needs root")
	}
	if err := lab.Cleanup(ctx); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "lab down: nothing of the lab is left")
	return nil
}

func cmdLabDiskemu(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab diskemu", "sanqos lab diskemu --mount DIR --backing DIR --profile NAME [--seed N]",
		"Serve the emulated disk until interrupted (lab up runs this itself).", stderr)
	mount := fs.String("mount", "", "mount point")
	backing := fs.String("backing", "", "directory of the backing files")
	profile := fs.String("profile", lab.DefaultStorage.Profile, "disk model")
	seed := fs.Int64("seed", 1, "seed of the model's random numbers")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *mount == "" || *backing == "" {
		fmt.Fprintf(stderr, "sanqos lab diskemu: --mount and --backing are required\n")
		return errUsage
	}
	return lab.ServeEmu(ctx, *mount, *backing, *profile, *seed)
}
