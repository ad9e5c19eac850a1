package direction

import "testing"

func TestParseAndString(t *testing.T) {
	for _, d := range []Direction{Write, Read, Both} {
		got, err := Parse(d.String())
		if err != nil || got != d {
			t.Errorf("Parse(%q) = %v, %v; want %v", d.String(), got, err, d)
		}
	}
	if _, err := Parse("sideways"); err == nil {
		t.Error(`Parse("sideways") is accepted`)
	}
	if s := Direction(0).String(); s != "direction(0)" {
		t.Errorf("zero direction prints %q", s)
	}
}
