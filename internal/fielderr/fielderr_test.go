package fielderr

import (
	"errors"
	"fmt"
	"testing"
)

func TestSplit(t *testing.T) {
	kp := New("control.Params.Kp", "Kp", -1.0, "must be > 0")
	th := At("engine.Resource.ThresholdMs", "threshold", "db", 0.0, "must be > 0")
	plain := errors.New("resource #0 has no name")
	tests := []struct {
		name       string
		err        error
		fields     []*Error
		otherTexts []string
	}{
		{"nil", nil, nil, nil},
		{"one field", kp, []*Error{kp}, nil},
		{"wrapped field", fmt.Errorf("controller pid: %w", kp), []*Error{kp}, nil},
		{"joined", errors.Join(plain, fmt.Errorf("controller pid: %w", errors.Join(kp, th))), []*Error{kp, th}, []string{plain.Error()}},
		{"wrapper of no field kept whole", fmt.Errorf("policy: %w", plain), nil, []string{"policy: resource #0 has no name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, o := Split(tt.err)
			if len(f) != len(tt.fields) {
				t.Fatalf("fields %v, want %v", f, tt.fields)
			}
			for i := range f {
				if f[i] != tt.fields[i] {
					t.Errorf("field %d: %v, want %v", i, f[i], tt.fields[i])
				}
			}
			if len(o) != len(tt.otherTexts) {
				t.Fatalf("other %v, want %v", o, tt.otherTexts)
			}
			for i := range o {
				if o[i].Error() != tt.otherTexts[i] {
					t.Errorf("other %d: %q, want %q", i, o[i], tt.otherTexts[i])
				}
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	if got, want := New("engine.Config.Tick", "tick", "1ms", "must be between 10ms and 10s").Error(), "tick 1ms: must be between 10ms and 10s"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got, want := At("engine.Resource.ThresholdMs", "threshold", "db", 0, "must be > 0").Error(), `threshold "db" 0: must be > 0`; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
