package nfqbackend

import (
	"net"
	"strings"
	"testing"
	"time"
)

// RepairLab lends the live lab to the daemon's repair test
// (repair_live_test.go), which is an external test: the daemon imports
// this package, so it cannot be tested from inside it.
type RepairLab struct {
	l *lab
	// Backend is the nfqueue backend, running in the target namespace.
	Backend *Nfqueue
}

// NewRepairLab starts a lab with an nfqueue backend; both go at cleanup.
func NewRepairLab(t *testing.T) *RepairLab {
	l := newLab(t)
	return &RepairLab{l: l, Backend: l.backend(t)}
}

// ClientIP is the address of the lab's consumer.
const ClientIP = clientIP

// Dial opens an echo connection from the client to the target.
func (r *RepairLab) Dial() net.Conn { return r.l.dial('e') }

// RTT measures one round trip of one byte on c.
func (r *RepairLab) RTT(c net.Conn) time.Duration { return r.l.rtts(c, 1)[0] }

// InTarget runs a command in the target namespace.
func (r *RepairLab) InTarget(t *testing.T, cmd string) string {
	t.Helper()
	f := strings.Fields(cmd)
	out, err := r.l.targetRunner.Run(t.Context(), "", f[0], f[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
