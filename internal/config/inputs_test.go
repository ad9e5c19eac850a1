package config

import (
	"strings"
	"testing"
)

// Finding 11 of issue 14: inputs that were accepted silently. Each must
// now give one error naming the key, or a warning where the value is
// legitimate but worth a second look. (Those of values other packages
// own: cmd/sanqos's TestOwnersRefuseInKeys.)
func TestLoadRefusesSilentMistakes(t *testing.T) {
	static := "[discovery]\nadapter = \"static\"\n"
	cons := func(res, addr, dev string) string {
		return "[[static.consumers]]\nresource = \"" + res + "\"\naddr = \"" + addr + "\"\ndevice = \"" + dev + "\"\n"
	}
	tests := []struct {
		name, text string
		want       []string
	}{
		{"duplicate static consumer", static + cons("p", "10.0.0.3", "loop1") + cons("p", "10.0.0.3", "loop1"),
			[]string{"static.consumers[1]", "duplicate of static.consumers[0]"}},
		{"one IP in two resources", static + cons("a", "10.0.0.3", "loop1") + cons("b", "10.0.0.3", "loop2"),
			[]string{"static.consumers[1].addr", "10.0.0.3", `"a"`, `"b"`}},
		{"empty socket", `socket = ""`, []string{`socket = ""`, "absolute path"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(write(t, tt.text))
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.text)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	for _, tt := range []struct {
		listen string
		want   string
	}{
		{"0.0.0.0:9469", "every interface"},
		{"[::]:9469", "every interface"},
		{":9469", "every interface"},
		{"localhost:9469", "host name"},
		{"127.0.0.1:9469", ""},
		{"", ""},
	} {
		c := Default()
		c.Listen = tt.listen
		if err := c.Validate(); err != nil {
			t.Fatalf("listen %q: %v", tt.listen, err)
		}
		w := strings.Join(c.Warnings(), "\n")
		if tt.want == "" && w != "" || !strings.Contains(w, tt.want) {
			t.Errorf("listen %q: warnings %q, want %q", tt.listen, w, tt.want)
		}
	}
}

// TestRulesOffWarns: a daemon with rules of its law off is being
// measured, and says so at every start and reload.
func TestRulesOffWarns(t *testing.T) {
	c := Default()
	if w := c.Warnings(); len(w) != 0 {
		t.Fatalf("defaults warn: %q", w)
	}
	c.PID.RulesOff = []string{"armed"}
	if w := strings.Join(c.Warnings(), "\n"); !strings.Contains(w, `pid.rules_off = ["armed"]`) || !strings.Contains(w, "measurement") {
		t.Errorf("rules off: warnings %q", w)
	}
}
