package discover

import (
	"os"
	"strings"
	"testing"
)

// FuzzParseProcNet: any input gives entries or one error, never a panic.
func FuzzParseProcNet(f *testing.F) {
	for _, p := range []string{"testdata/socket/ganesha/proc/self/net/tcp6", "testdata/socket/qemu-nbd/proc/self/net/tcp"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b))
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		es, err := parseProcNet(strings.NewReader(s), "tcp")
		if err != nil && es != nil {
			t.Errorf("entries %v with error %v", es, err)
		}
	})
}

// FuzzParseExports: both export formats take any text without a panic,
// and every path they return is absolute.
func FuzzParseExports(f *testing.F) {
	f.Add("EXPORT { Path = /a; }")
	f.Add("/srv/x host(rw)\n\"/y z\" \\\n a(ro)\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range parseEtcExports(s) {
			if !strings.HasPrefix(p, "/") {
				t.Errorf("exports path %q not absolute", p)
			}
		}
		for _, p := range parseGaneshaExports(s) {
			if p == "" {
				t.Error("empty ganesha path")
			}
		}
	})
}
