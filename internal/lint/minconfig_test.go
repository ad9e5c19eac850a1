package lint

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sanqos/sanqos/internal/config"
)

// TestMinimalConfigIsTheDefaults: the configuration make install and the
// package put in /etc/sanqos loads, and sets nothing: the daemon it
// starts runs on the defaults (autonomic, tgt), and no example resource
// or manual list of the documented example is live on a real host.
func TestMinimalConfigIsTheDefaults(t *testing.T) {
	c, err := config.Load(filepath.Join(moduleRoot(t), "deploy/sanqos.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if d := config.Default(); !reflect.DeepEqual(c, d) {
		t.Errorf("deploy/sanqos.toml sets keys; it should only comment them:\n%+v\nwant the defaults\n%+v", c, d)
	}
}
