package discover

import (
	"context"
	"fmt"
	"net/netip"
)

// StaticConsumer is one consumer listed in the configuration file.
type StaticConsumer struct {
	Resource string // resource name; consumers with the same name share it
	Addr     string // initiator IP address
	Device   string // block device path or kernel name ("/dev/loop3", "dm-0")
}

// Static is the adapter for targets sanqos cannot inspect: the operator
// lists the consumers.
type Static struct {
	atts []Attachment
}

// NewStatic checks the list once, so a bad entry is reported at start
// with its position rather than at every discovery.
func NewStatic(consumers []StaticConsumer) (*Static, error) {
	s := &Static{}
	for i, c := range consumers {
		a, err := netip.ParseAddr(c.Addr)
		if err != nil {
			return nil, fmt.Errorf("static consumer %d: addr %q: must be an IP address like 192.0.2.10", i+1, c.Addr)
		}
		if c.Device == "" {
			return nil, fmt.Errorf("static consumer %d (%s): device is empty: give the block device serving it, like /dev/loop3", i+1, c.Addr)
		}
		s.atts = append(s.atts, Attachment{Addr: a.Unmap(), Backing: c.Device, Resource: c.Resource})
	}
	return s, nil
}

// Name implements Adapter.
func (s *Static) Name() string { return "static" }

// Attachments implements Adapter.
func (s *Static) Attachments(context.Context) ([]Attachment, error) {
	return append([]Attachment(nil), s.atts...), nil
}
