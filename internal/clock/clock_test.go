package clock

import (
	"testing"
	"time"
)

func TestFakeTickerFiresInOrder(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	tk := f.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	after := f.After(250 * time.Millisecond)

	f.Advance(100 * time.Millisecond)
	select {
	case got := <-tk.C():
		if want := start.Add(100 * time.Millisecond); !got.Equal(want) {
			t.Fatalf("tick at %v, want %v", got, want)
		}
	default:
		t.Fatal("ticker did not fire at 100ms")
	}
	f.Advance(200 * time.Millisecond)
	select {
	case got := <-after:
		if want := start.Add(250 * time.Millisecond); !got.Equal(want) {
			t.Fatalf("After fired at %v, want %v", got, want)
		}
	default:
		t.Fatal("After(250ms) did not fire by 300ms")
	}
	if got, want := f.Now(), start.Add(300*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now = %v, want %v", got, want)
	}
}

func TestFakeTickerStop(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tk := f.NewTicker(time.Second)
	tk.Stop()
	f.Advance(3 * time.Second)
	select {
	case <-tk.C():
		t.Fatal("stopped ticker fired")
	default:
	}
}
