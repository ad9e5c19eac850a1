package discover

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/observe/mountinfo"
)

// The fixtures under testdata/socket are real: captured with
// testdata/socket/capture.sh from a qemu-nbd 7.2 serving a raw image on
// 10.217.0.1:10809 with qemu-io connected from 10.217.0.2, and from
// nfs-ganesha 4.3 (NFSv3, VFS) exporting /tmp/sanqos-w17/export with two
// connections of one client, each in network namespaces of their own.

func TestParseHexAddrPort(t *testing.T) {
	tests := []struct {
		in   string
		want string
		err  bool
	}{
		{"0100D90A:2A39", "10.217.0.1:10809", false},
		{"00000000:006F", "0.0.0.0:111", false},
		{"0000000000000000FFFF00000100D90A:0801", "10.217.0.1:2049", false}, // v4-mapped: unmapped
		{"00000000000000000000000001000000:0CBC", "[::1]:3260", false},
		{"0100D90A", "", true},
		{"01D90A:2A39", "", true},
		{"0100D90A:XYZ", "", true},
		{"0100D90A:10000", "", true},
	}
	for _, tc := range tests {
		got, err := parseHexAddrPort(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("%s: err %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if !tc.err && got.String() != tc.want {
			t.Errorf("%s = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestParseProcNetMalformed(t *testing.T) {
	head := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	for _, body := range []string{
		"   0: 0100D90A:2A39 00000000:0000 0A 00000000:00000000\n",
		"   0: 0100D90A:2A39 00000000:0000 ZZ 00000000:00000000 00:00000000 00000000     0        0 45962 1\n",
		"   0: 0100D90A:2A39 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 -1 1\n",
		"   0: nonsense 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n",
	} {
		if _, err := parseProcNet(strings.NewReader(head+body), "tcp"); err == nil || !strings.Contains(err.Error(), "tcp line 2") {
			t.Errorf("%q: err %v, want one naming tcp line 2", body, err)
		}
	}
	es, err := parseProcNet(strings.NewReader(head), "tcp")
	if err != nil || len(es) != 0 {
		t.Errorf("header only: %v, %v; want nothing, no error", es, err)
	}
}

func TestSocketAttachments(t *testing.T) {
	client := netip.MustParseAddr("10.217.0.2")
	tests := []struct {
		name    string
		cfg     SocketConfig
		want    []Attachment
		wantErr string
	}{
		{
			name: "qemu-nbd: the image it holds open read-write; its log (write-only) is not served",
			cfg:  SocketConfig{Ports: []int{10809}, ProcRoot: "testdata/socket/qemu-nbd/proc", SysRoot: "testdata/socket/ganesha/sys"},
			want: []Attachment{{Target: "qemu-nbd:10809", Addr: client, Backing: "/tmp/sanqos-w17/nbd.img"}},
		},
		{
			// ganesha ran in a mount namespace of its own (a private
			// /run): its export is resolved through its mount table to
			// the device holding it, vda (254:0).
			name: "ganesha: the exports of its own configuration (its -f), one consumer for two connections",
			cfg:  SocketConfig{Ports: []int{2049}, ProcRoot: "testdata/socket/ganesha/proc", SysRoot: "testdata/socket/ganesha/sys", FileRoot: "testdata/socket/ganesha/root"},
			want: []Attachment{{Target: "ganesha.nfsd:2049", Addr: client, Backing: "vda"}},
		},
		{
			name: "ganesha in its own mount namespace, the device number unknown here: the path stays",
			cfg:  SocketConfig{Ports: []int{2049}, ProcRoot: "testdata/socket/ganesha/proc", SysRoot: "testdata/socket/nonexistent", FileRoot: "testdata/socket/ganesha/root"},
			want: []Attachment{{Target: "ganesha.nfsd:2049", Addr: client, Backing: "/tmp/sanqos-w17/export"}},
		},
		{
			name: "an export list given overrides the process",
			cfg:  SocketConfig{Ports: []int{2049}, ProcRoot: "testdata/socket/ganesha/proc", Exports: []string{"testdata/socket/exports/exports"}},
			want: []Attachment{
				{Target: "exports:2049", Addr: client, Backing: "/srv/nfs/a"},
				{Target: "exports:2049", Addr: client, Backing: "/srv/nfs/with space"},
			},
		},
		{
			name: "a port that listens but has no clients: nothing, no error",
			cfg:  SocketConfig{Ports: []int{10809}, ProcRoot: "testdata/socket/ganesha/proc"},
		},
		{
			name:    "nothing listens on any port: an error that says what to do",
			cfg:     SocketConfig{Ports: []int{4420}, ProcRoot: "testdata/socket/ganesha/proc"},
			wantErr: "nothing listens on TCP port(s) [4420]",
		},
		{
			name:    "ganesha whose configuration cannot be read",
			cfg:     SocketConfig{Ports: []int{2049}, ProcRoot: "testdata/socket/ganesha/proc", SysRoot: "testdata/socket/ganesha/sys", FileRoot: "testdata/socket/nonexistent"},
			wantErr: "discovery.exports",
		},
		{
			name:    "no process holds the listener (a kernel server)",
			cfg:     SocketConfig{Ports: []int{10809}, ProcRoot: "testdata/socket/orphan/proc"},
			wantErr: "knfsd",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSocket(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Attachments(t.Context())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestNewSocketRefuses(t *testing.T) {
	for _, ports := range [][]int{nil, {0}, {70000}} {
		if _, err := NewSocket(SocketConfig{Ports: ports}); err == nil {
			t.Errorf("ports %v accepted", ports)
		}
	}
}

func TestParseExports(t *testing.T) {
	tests := []struct {
		name, text string
		ganesha    bool
		want       []string
	}{
		{"ganesha: quoted, comments, nested FSAL, Pseudo is not Path", `
EXPORT_DEFAULTS { Access_Type = RW; }
EXPORT {
  Export_Id = 1;
  Path = "/srv/a";  # the data
  Pseudo = /pseudo/a;
  FSAL { Name = VFS; }
}
# EXPORT { Path = /commented; }
export{Export_Id=2;Path=/srv/b;Pseudo=/b;}
`, true, []string{"/srv/a", "/srv/b"}},
		{"ganesha: none", "NFS_CORE_PARAM { Protocols = 3; }", true, nil},
		{"exports: continuation, quotes, duplicates, comments", `# c
/srv/x host(rw)
"/srv/y z" \
  a(rw)
/srv/x other(ro)
`, false, []string{"/srv/x", "/srv/y z"}},
	}
	for _, tc := range tests {
		var got []string
		if tc.ganesha {
			got = parseGaneshaExports(tc.text)
		} else {
			got = parseEtcExports(tc.text)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestGaneshaConfig(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"ganesha.nfsd", "-f", "/x.conf", "-N", "NIV_EVENT"}, "/x.conf"},
		{[]string{"ganesha.nfsd", "-f/y.conf"}, "/y.conf"},
		{[]string{"ganesha.nfsd"}, "/etc/ganesha/ganesha.conf"},
	}
	for _, tc := range tests {
		if got := ganeshaConfig(tc.args); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.args, got, tc.want)
		}
	}
}

func TestHoldingMount(t *testing.T) {
	ms := []mountinfo.Mount{
		{Point: "/", Major: 254},
		{Point: "/srv", Major: 7, Minor: 1},
		{Point: "/srv/export", Major: 7, Minor: 3},
		{Point: "/srv/export", Major: 0, Minor: 44}, // mounted over it: on top
	}
	tests := []struct {
		path string
		want string
	}{
		{"/srv/export/a", "0:44"},
		{"/srv/exported", "7:1"},
		{"/srv", "7:1"},
		{"/tmp/x", "254:0"},
	}
	for _, tc := range tests {
		m, ok := holdingMount(ms, tc.path)
		if !ok || m.Dev() != tc.want {
			t.Errorf("%s: %v %v, want %s", tc.path, m.Dev(), ok, tc.want)
		}
	}
}

func TestSocketLinger(t *testing.T) {
	s, err := NewSocket(SocketConfig{Ports: []int{10809}, Linger: 10 * time.Second, ProcRoot: "testdata/socket/qemu-nbd/proc", SysRoot: "testdata/socket/ganesha/sys"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	gone := netip.MustParseAddr("10.217.0.9")
	s.seen[10809] = map[netip.Addr]time.Time{gone: now.Add(-9 * time.Second)}
	tests := []struct {
		after time.Duration
		want  []string
	}{
		{0, []string{"10.217.0.2", "10.217.0.9"}}, // connected now; closed 9 s ago
		{2 * time.Second, []string{"10.217.0.2"}}, // the closed one is 11 s past
	}
	for _, tc := range tests {
		now = now.Add(tc.after)
		atts, err := s.Attachments(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, a := range atts {
			got = append(got, a.Addr.String())
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("after %v: clients %v, want %v", tc.after, got, tc.want)
		}
	}
}

func TestConnected(t *testing.T) {
	// include/net/tcp_states.h: 1 ESTABLISHED, 2 SYN_SENT, 3 SYN_RECV,
	// 4 FIN_WAIT1, 5 FIN_WAIT2, 6 TIME_WAIT, 7 CLOSE, 8 CLOSE_WAIT,
	// 9 LAST_ACK, 10 LISTEN, 11 CLOSING, 12 NEW_SYN_RECV.
	want := map[int]bool{1: true, 4: true, 5: true, 6: true, 8: true, 9: true, 11: true}
	for st := 0; st <= 12; st++ {
		if connected(st) != want[st] {
			t.Errorf("state %d: connected %v, want %v", st, connected(st), want[st])
		}
	}
}

func TestSocketNoLinger(t *testing.T) {
	s, err := NewSocket(SocketConfig{Ports: []int{10809}, Linger: -1, ProcRoot: "testdata/socket/qemu-nbd/proc", SysRoot: "testdata/socket/ganesha/sys"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	s.seen[10809] = map[netip.Addr]time.Time{netip.MustParseAddr("10.217.0.9"): now.Add(-time.Second)}
	atts, err := s.Attachments(t.Context())
	if err != nil || len(atts) != 1 || atts[0].Addr.String() != "10.217.0.2" {
		t.Errorf("without linger: %+v, %v; want only the client connected now", atts, err)
	}
}
