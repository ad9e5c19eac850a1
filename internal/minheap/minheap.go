// Package minheap is a min-heap of values, for the queues ordered by time
// that the packet path, the disk model and the emulated disk keep.
//
// It moves elements exactly as container/heap does, so a queue that
// moves to it pops equal keys in the same order as before; unlike
// container/heap it stores the values themselves, not interfaces, so a
// push allocates nothing beyond the slice's growth (the packet path
// pushes every held packet).
package minheap

// Heap is a min-heap by Less. Items is in heap order: read it freely
// (Items[0] is the least), and after changing it other than through Push
// and Pop, call Init.
type Heap[T any] struct {
	Items []T
	Less  func(a, b T) bool
}

// New returns an empty heap ordered by less.
func New[T any](less func(a, b T) bool) Heap[T] { return Heap[T]{Less: less} }

// Len is the number of items.
func (h *Heap[T]) Len() int { return len(h.Items) }

// Push adds x.
func (h *Heap[T]) Push(x T) {
	h.Items = append(h.Items, x)
	h.up(len(h.Items) - 1)
}

// Pop removes and returns the least item. The heap must not be empty.
func (h *Heap[T]) Pop() T {
	n := len(h.Items) - 1
	h.Items[0], h.Items[n] = h.Items[n], h.Items[0]
	h.down(0, n)
	x := h.Items[n]
	var zero T
	h.Items[n] = zero // let go of what it refers to
	h.Items = h.Items[:n]
	return x
}

// Init puts Items in heap order.
func (h *Heap[T]) Init() {
	n := len(h.Items)
	for i := n/2 - 1; i >= 0; i-- {
		h.down(i, n)
	}
}

func (h *Heap[T]) up(j int) {
	q := h.Items
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.Less(q[j], q[i]) {
			break
		}
		q[i], q[j] = q[j], q[i]
		j = i
	}
}

func (h *Heap[T]) down(i, n int) {
	q := h.Items
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.Less(q[j2], q[j1]) {
			j = j2 // right child
		}
		if !h.Less(q[j], q[i]) {
			break
		}
		q[i], q[j] = q[j], q[i]
		i = j
	}
}
