package owned

import (
	"os"
	"testing"
)

// parseSave reads a chain out of real iptables-save output (iptables
// 1.8.9, nf_tables): its jumps from POSTROUTING and INPUT and its rules
// in the form they were installed in.
func TestParseSave(t *testing.T) {
	b, err := os.ReadFile("testdata/iptables-save-mangle.txt")
	if err != nil {
		t.Fatal(err)
	}
	in := parseSave(string(b), "SANQOS-q3260")
	if !in.Exists || in.Jumps["POSTROUTING"] != 1 || in.Jumps["INPUT"] != 1 || len(in.Rules) != 3 {
		t.Fatalf("parsed %+v", in)
	}
	want := "-A SANQOS-q3260 -p tcp -m tcp --sport 3260 -m set --match-set sanqos-q3260-r1 dst -j NFQUEUE --queue-num 3260 --queue-bypass"
	if in.Rules[0] != want {
		t.Errorf("first rule %q, want %q: the form we install", in.Rules[0], want)
	}
	if got := parseSave(string(b), "SANQOS-q1"); got.Exists || len(got.Jumps) != 0 || got.Rules != nil {
		t.Errorf("another instance's chain: %+v", got)
	}
}
