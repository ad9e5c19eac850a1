package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sanqos/sanqos/internal/cli"
	"github.com/sanqos/sanqos/internal/serve/ctl"
)

// throttleDescription is the --help text of 'sanqos throttle'.
const throttleDescription = `Set, free or list a manual packet delay for one initiator, on the running
daemon ('sanqos run', manual or autonomic). The delay applies to the TCP
packets the target sends the initiator from the given ports: write delays
small segments (R2T, SCSI response), and pure ACKs too if the daemon runs
with --ack-delay, which slows its writes; read delays data segments, which
slows its reads. --list shows which.

--rate caps the rate the target sends the initiator (its reads) with an
HTB class instead (thesis §5.2): the daemon needs a rate data path, either
--backend htb --dev IFACE, or its delay backend with --rate-dev IFACE (the
interface towards the initiators). An initiator has a delay or a rate at a
time, not both: --free the one to set the other.

--share, --reserve, --cap and --threshold change a consumer's tenant terms
on the autonomic daemon (see [tenants] in the configuration): CONSUMER is an
address, a prefix, an initiator name or a configured tenant name. Each term
given replaces the configuration's for that consumer, the others stay; a
rate or threshold of 0 removes it. They take precedence over the file's
until --clear-terms CONSUMER, and outlive a reload (SIGHUP): they are laid
over the reloaded file's terms. A restart forgets them. Needs root.`

func cmdThrottle(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("throttle", `sanqos throttle --ip IP --delay D [--direction write|read|both] [--port 3260]
       sanqos throttle --ip IP --rate R [--direction read] [--port 3260]
       sanqos throttle --ip IP --free
       sanqos throttle [--share N] [--reserve R] [--cap R] [--threshold D] CONSUMER
       sanqos throttle --clear-terms CONSUMER
       sanqos throttle --list`,
		throttleDescription, stderr)
	ip := fs.String("ip", "", "initiator IP address (IPv4 or IPv6)")
	delay := fs.String("delay", "", "added delay, e.g. 4.6ms (more than 0, at most 1s)")
	rate := fs.String("rate", "", "read rate cap, e.g. 10MB/s, 512KiB/s, 80Mbit/s (more than 0, at most the link)")
	dir := fs.String("direction", "", "write, read or both (default: write for --delay, read for --rate, which caps reads only)")
	port := fs.String("port", "3260", "target port(s), comma-separated")
	free := fs.Bool("free", false, "remove the initiator's manual delay or rate")
	list := fs.Bool("list", false, "list the throttles in force")
	var tr ctl.TermsRequest
	fs.StringVar(&tr.Share, "share", "", "the consumer's share among the writers of a throttled resource, e.g. 4 (default 1)")
	fs.StringVar(&tr.Reserve, "reserve", "", "a write rate the consumer is never delayed below, e.g. 20MB/s (0: none)")
	fs.StringVar(&tr.Cap, "cap", "", "the most the consumer may write, e.g. 50MB/s (0: none)")
	fs.StringVar(&tr.Threshold, "threshold", "", "the consumer's own read promise, e.g. 8ms (0: its resource's)")
	clearTerms := fs.Bool("clear-terms", false, "remove the consumer's runtime terms: the configuration's apply")
	socket := fs.String("socket", ctl.DefaultSocket, "control socket of the daemon")
	if err := cli.ParseUpTo(fs, args, 1); err != nil {
		return err
	}
	terms := tr != (ctl.TermsRequest{})
	modes := 0
	for _, on := range []bool{*delay != "", *rate != "", *free, *list, terms, *clearTerms} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		return usageError(fs, "give exactly one of --delay D (set a delay), --rate R (cap reads), --free (remove either), terms (--share, --reserve, --cap, --threshold), --clear-terms or --list")
	}
	var req ctl.Request
	var set ctl.Manual
	var err error
	if terms || *clearTerms {
		req, err = termsRequest(fs, tr, *ip, *clearTerms)
	} else if fs.NArg() > 0 {
		err = usageError(fs, "unexpected argument %q: give the initiator as --ip", fs.Arg(0))
	} else {
		req, set, err = throttleRequest(fs, *ip, *delay, *rate, *dir, *port, *free, *list)
	}
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("the daemon's control socket is root-only; run as root")
	}
	// A daemon answers in milliseconds; applying a throttle through iptables
	// can take a second or two on a busy target. Past 15 s it is hung, and
	// the administrator should hear so rather than wait.
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := ctl.Call(ctx, *socket, req)
	if err != nil {
		return err
	}
	reportThrottle(stdout, req, set, resp, *port)
	return nil
}

// reportThrottle says what the daemon did with req.
func reportThrottle(w io.Writer, req ctl.Request, set ctl.Manual, resp ctl.Response, port string) {
	switch req.Op {
	case ctl.OpThrottle:
		fmt.Fprintf(w, "%s: %s on port(s) %s\n", req.IP, set.Kind(), port)
	case ctl.OpFree:
		fmt.Fprintf(w, "%s: throttle removed\n", req.IP)
	case ctl.OpTerms:
		fmt.Fprintf(w, "%s: runtime terms set (see 'sanqos status'; --clear-terms to return to the configuration's)\n", req.Match)
	case ctl.OpClearTerms:
		fmt.Fprintf(w, "%s: runtime terms cleared; the configuration's apply\n", req.Match)
	default:
		printThrottles(w, resp)
	}
}

// throttleRequest builds the control request of one 'sanqos throttle' and
// checks it as the daemon will, so the message does not depend on a
// daemon being up.
func throttleRequest(fs *flag.FlagSet, ip, delay, rate, dir, port string, free, list bool) (ctl.Request, ctl.Manual, error) {
	switch {
	case list:
		return ctl.Request{Op: ctl.OpStatus}, ctl.Manual{}, nil
	case free:
		if ip == "" {
			return ctl.Request{}, ctl.Manual{}, usageError(fs, "--free needs the --ip of the initiator to free")
		}
		return ctl.Request{Op: ctl.OpFree, IP: ip}, ctl.Manual{}, nil
	}
	ports, err := parsePorts(port)
	if err != nil {
		return ctl.Request{}, ctl.Manual{}, err
	}
	req := ctl.Request{Op: ctl.OpThrottle, IP: ip, Delay: delay, Rate: rate, Direction: dir, Ports: ports}
	m, err := ctl.ParseManual(req)
	return req, m, err
}

// termsRequest builds a terms or clear-terms request for the consumer
// named as the argument (or --ip), checked as the daemon will.
func termsRequest(fs *flag.FlagSet, tr ctl.TermsRequest, ip string, clearTerms bool) (ctl.Request, error) {
	tr.Match = ip
	if fs.NArg() > 0 {
		if ip != "" {
			return ctl.Request{}, usageError(fs, "name the consumer once: as the argument or as --ip")
		}
		tr.Match = fs.Arg(0)
	}
	if tr.Match == "" {
		return ctl.Request{}, usageError(fs, "name the consumer: an address, a prefix, an initiator name or a tenant name, after the flags")
	}
	if clearTerms {
		return ctl.Request{Op: ctl.OpClearTerms, TermsRequest: ctl.TermsRequest{Match: tr.Match}}, nil
	}
	if _, err := ctl.ParseTerms(tr); err != nil {
		return ctl.Request{}, err
	}
	return ctl.Request{Op: ctl.OpTerms, TermsRequest: tr}, nil
}

func parsePorts(s string) ([]uint16, error) {
	var ps []uint16
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("--port %q: want TCP port numbers 1-65535, comma-separated", s)
		}
		ps = append(ps, uint16(p))
	}
	return ps, nil
}

func printThrottles(w io.Writer, r ctl.Response) {
	fmt.Fprintf(w, "daemon: %s mode, backend %s\n", r.Mode, r.Backend)
	if len(r.Throttles) == 0 {
		fmt.Fprintln(w, "no throttles")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "IP\tDELAY\tRATE\tDIRECTION\tPORTS\tSOURCE")
		for _, t := range r.Throttles {
			ps := make([]string, len(t.Ports))
			for i, p := range t.Ports {
				ps[i] = strconv.Itoa(int(p))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.IP, dash(t.Delay), dash(t.Rate), t.Direction, strings.Join(ps, ","), t.Source)
		}
		tw.Flush()
	}
	if len(r.Terms) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CONSUMER\tRUNTIME TERMS (over the configuration's)")
		for _, t := range r.Terms {
			fmt.Fprintf(tw, "%s\t%s\n", t.Match, t.Terms)
		}
		tw.Flush()
	}
	if s := r.Stats; s != nil {
		switch s.PureAcks {
		case "held":
			fmt.Fprintln(w, "write delays hold pure ACKs too (--ack-delay)")
		case "passed":
			fmt.Fprintf(w, "write delays hold small segments only; pure ACKs pass at once (%d so far; --ack-delay holds them)\n", s.AcksPassed)
		}
		fmt.Fprintf(w, "packets held %d, passed %d, backlog %d, bypassed %d, errors %d, delay error p50 %v max %v",
			s.PacketsHeld, s.PacketsPassed, s.Backlog, s.Bypassed, s.Errors, s.DelayErrorP50, s.DelayErrorMax)
		if s.DelayErrorAvg > 0 {
			fmt.Fprintf(w, " avg %v", s.DelayErrorAvg) // edt: fq's moving average
		}
		if s.Dropped > 0 {
			fmt.Fprintf(w, ", DROPPED %d", s.Dropped)
		}
		fmt.Fprintln(w)
	}
}

// dash shows an empty column as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
