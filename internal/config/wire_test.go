package config

import (
	"strings"
	"testing"
)

func TestWireKeys(t *testing.T) {
	tests := []struct {
		name, toml, wantErr string
	}{
		{"socket adapter with exports and a split", "ports = [2049]\nattribution = \"auto\"\n[discovery]\nadapter = \"socket\"\nexports = [\"/etc/exports\"]\n[small_segment]\n2049 = 300\n", ""},
		{"bad attribution", "attribution = \"bytes\"\n", `attribution = "bytes"`},
		{"exports without the socket adapter", "[discovery]\nexports = [\"/etc/exports\"]\n", "used only with discovery.adapter = \"socket\""},
		{"relative export list", "ports = [2049]\n[discovery]\nadapter = \"socket\"\nexports = [\"exports\"]\n", "absolute path"},
		{"split of a port not served", "ports = [2049]\n[small_segment]\n3260 = 128\n", `small_segment."3260"`},
		{"split not a number", "[small_segment]\nnfs = 128\n", `small_segment."nfs"`},
	}
	for _, tc := range tests {
		c := Default()
		err := c.decode(tc.toml)
		if err == nil {
			err = c.Validate()
		}
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestWireOn(t *testing.T) {
	c := Default()
	for _, tc := range []struct {
		attr, adapter string
		want          bool
	}{{"auto", "socket", true}, {"auto", "static", true}, {"auto", "tgt", false}, {"wire", "tgt", true}, {"device", "socket", false}} {
		c.Attribution, c.Discovery.Adapter = tc.attr, tc.adapter
		if c.WireOn() != tc.want {
			t.Errorf("attribution %s, adapter %s: WireOn %v, want %v", tc.attr, tc.adapter, !tc.want, tc.want)
		}
	}
}
