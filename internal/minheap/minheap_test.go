package minheap

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"testing"
)

// item has a key with many ties and an identity, so that the order
// among equal keys shows.
type item struct{ key, id int }

func less(a, b item) bool { return a.key < b.key }

// ref is the same queue through container/heap.
type ref []item

func (r ref) Len() int           { return len(r) }
func (r ref) Less(i, j int) bool { return r[i].key < r[j].key }
func (r ref) Swap(i, j int)      { r[i], r[j] = r[j], r[i] }
func (r *ref) Push(x any)        { *r = append(*r, x.(item)) }
func (r *ref) Pop() any {
	old := *r
	x := old[len(old)-1]
	*r = old[:len(old)-1]
	return x
}

// TestSameOrderAsContainerHeap: random pushes, pops, filters and inits,
// side by side with container/heap: the same item comes out every time,
// ties included, and the arrays stay identical.
func TestSameOrderAsContainerHeap(t *testing.T) {
	for _, c := range []struct {
		name       string
		keys, ops  int
		filterEach int
	}{
		{"few keys, many ties", 4, 5000, 0},
		{"many keys", 1 << 20, 5000, 0},
		{"with filters and Init", 8, 5000, 97},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(c.keys)))
			h, want := New(less), &ref{}
			for op := range c.ops {
				switch {
				case c.filterEach > 0 && op%c.filterEach == c.filterEach-1:
					odd := func(x item) bool { return x.id%2 == 1 }
					h.Items = slices.DeleteFunc(h.Items, odd)
					*want = slices.DeleteFunc(*want, odd)
					h.Init()
					heap.Init(want)
				case h.Len() == 0 || r.IntN(3) > 0:
					x := item{r.IntN(c.keys), op}
					h.Push(x)
					heap.Push(want, x)
				default:
					if got, w := h.Pop(), heap.Pop(want).(item); got != w {
						t.Fatalf("op %d: popped %v, container/heap %v", op, got, w)
					}
				}
				if !slices.Equal(h.Items, *want) {
					t.Fatalf("op %d: items %v, container/heap %v", op, h.Items, *want)
				}
			}
			for prev := -1; h.Len() > 0; {
				x := h.Pop()
				if x.key < prev {
					t.Fatalf("popped key %d after %d", x.key, prev)
				}
				prev = x.key
			}
		})
	}
}

// TestPushAllocatesNothing: beyond the slice's growth, a push and a pop
// allocate nothing (container/heap boxes every push).
func TestPushAllocatesNothing(t *testing.T) {
	h := New(less)
	h.Items = make([]item, 0, 64)
	n := 0
	if a := testing.AllocsPerRun(1000, func() {
		h.Push(item{n % 7, n})
		n++
		if h.Len() > 32 {
			h.Pop()
		}
	}); a != 0 {
		t.Errorf("%v allocations per push and pop, want 0", a)
	}
}
