package owned

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/act/acttest"
)

// busyOnce fails the first deletion of a chain as iptables-nft sometimes
// does right after the chain's last rule went (audit N9).
type busyOnce struct {
	acttest.Recorder
	failed bool
}

func (r *busyOnce) Run(ctx context.Context, stdin, name string, args ...string) (string, error) {
	if strings.Contains(strings.Join(args, " "), " -X ") && !r.failed {
		r.failed = true
		return "iptables v1.8.9 (nf_tables):  CHAIN_DEL failed (Device or resource busy): chain SANQOS-q3260",
			fmt.Errorf("exit status 4")
	}
	return r.Recorder.Run(ctx, stdin, name, args...)
}

func TestRemoveRetriesABusyChainDelete(t *testing.T) {
	r := &busyOnce{}
	r.Chained = true
	f := &Iptables{Run: r}
	if err := f.Remove(context.Background(), "SANQOS-q3260"); err != nil {
		t.Fatalf("one EBUSY from the chain deletion failed the removal: %v", err)
	}
	if r.Chained {
		t.Error("the chain is still there")
	}
	r2 := &alwaysBusy{}
	r2.Chained = true
	err := (&Iptables{Run: r2}).Remove(context.Background(), "SANQOS-q3260")
	if err == nil || !strings.Contains(err.Error(), "busy") {
		t.Errorf("a chain that stays busy: error %v, want the kernel's answer", err)
	}
}

type alwaysBusy struct{ acttest.Recorder }

func (r *alwaysBusy) Run(ctx context.Context, stdin, name string, args ...string) (string, error) {
	if strings.Contains(strings.Join(args, " "), " -X ") {
		return "CHAIN_DEL failed (Device or resource busy)", errors.New("exit status 4: CHAIN_DEL failed (Device or resource busy)")
	}
	return r.Recorder.Run(ctx, stdin, name, args...)
}

// A set (or chain) that a just-deleted rule held is freed by nf_tables
// after the commit, later on a slow host: deletion is retried while the
// kernel says busy, and given up only when it stays busy or fails
// otherwise.
func TestRetryBusy(t *testing.T) {
	setBusy := fmt.Errorf("destroying: %w", nl.IPSetError(nl.IPSET_ERR_BUSY))
	other := errors.New("no such set")
	for _, c := range []struct {
		name      string
		errs      []error // what each try returns; past the end, success
		wantTries int
		wantErr   error
	}{
		{"free at once", nil, 1, nil},
		{"busy twice, then free", []error{setBusy, setBusy}, 3, nil},
		{"EBUSY from a chain", []error{unix.EBUSY}, 2, nil},
		{"another error is not retried", []error{other}, 1, other},
		{"busy for good", slices.Repeat([]error{setBusy}, busyTries+3), busyTries, setBusy},
	} {
		t.Run(c.name, func(t *testing.T) {
			tries := 0
			err := retryBusy(context.Background(), func() (bool, error) {
				tries++
				if tries > len(c.errs) {
					return false, nil
				}
				e := c.errs[tries-1]
				return isSetBusy(e), e
			})
			if tries != c.wantTries || !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Errorf("tries %d, err %v; want %d, %v", tries, err, c.wantTries, c.wantErr)
			}
		})
	}
}

// strayJump is a table in which a rule with matches of its own jumps to
// our chain: the unconditional jump Remove deletes is not it, and the
// chain stays busy until that rule goes too.
type strayJump struct {
	stray   bool
	chained bool
}

const strayRule = "-A POSTROUTING -p tcp -m tcp --sport 3260 -j SANQOS-q3260"

func (r *strayJump) Run(_ context.Context, _, _ string, args ...string) (string, error) {
	cmd := strings.Join(args, " ")
	switch {
	case strings.HasSuffix(cmd, "-t mangle -S"):
		if r.stray {
			return "-P POSTROUTING ACCEPT\n-N SANQOS-q3260\n" + strayRule + "\n", nil
		}
		return "-P POSTROUTING ACCEPT\n-N SANQOS-q3260\n", nil
	case strings.Contains(cmd, " -C "):
		return "", errors.New("exit status 1") // no unconditional jump
	case strings.Contains(cmd, " -D "+strings.TrimPrefix(strayRule, "-A ")):
		r.stray = false
	case strings.Contains(cmd, " -X "):
		if r.stray {
			return "CHAIN_DEL failed (Device or resource busy)", errors.New("exit status 4")
		}
		r.chained = false
	}
	return "", nil
}

func TestRemoveDeletesStrayJumpsWhenBusy(t *testing.T) {
	r := &strayJump{stray: true, chained: true}
	if err := (&Iptables{Run: r}).Remove(context.Background(), "SANQOS-q3260"); err != nil {
		t.Fatalf("a rule with matches jumping to the chain kept it busy: %v", err)
	}
	if r.stray || r.chained {
		t.Errorf("after Remove: stray jump %v, chain %v; want both gone", r.stray, r.chained)
	}
}
