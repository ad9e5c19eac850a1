package topology

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"
)

// Placed is a consumer together with where its device lands.
type Placed struct {
	Consumer   Consumer
	Resolution Resolution
	// Resource, when set, names the resource outright (static
	// configuration) instead of deriving it from the leaves.
	Resource string
}

// Group builds the topology: consumers whose leaf sets intersect share a
// resource (union-find over leaves), and consumers given an explicit
// resource name join that one. Names are sanitized with SanitizeName and
// made unique; the result is sorted by name so it is stable across
// discoveries.
func Group(items []Placed) Topology {
	var t Topology
	count := map[string]int{}
	for _, members := range connected(items) {
		res := resourceOf(items, members)
		count[res.Name]++
		t.Resources = append(t.Resources, res)
	}
	// Groups suggesting the same name (mounts "/a b" and "/a-b" sanitize
	// alike) all get a hash of their smallest leaf appended. Leaf sets of
	// groups are disjoint, so the results differ, and a name never depends
	// on which group was found first (it is an ipset and metrics name).
	for i := range t.Resources {
		r := &t.Resources[i]
		if count[r.Name] > 1 && len(r.Leaves) > 0 {
			r.Name = withHash(r.Name, r.Leaves[0])
		}
	}
	sort.Slice(t.Resources, func(a, b int) bool { return t.Resources[a].Name < t.Resources[b].Name })
	return t
}

// connected groups the items that share a leaf or a configured resource
// name (union-find), each group as the indices of its items, in the order
// of their first items.
func connected(items []Placed) [][]int {
	parent := make([]int, len(items))
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(a, b int) {
		ra, rb := find(a), find(b)
		if ra < rb {
			parent[rb] = ra
		} else if rb < ra {
			parent[ra] = rb
		}
	}
	byLeaf := map[string]int{}
	byName := map[string]int{}
	join := func(seen map[string]int, key string, i int) {
		if j, ok := seen[key]; ok {
			union(i, j)
		} else {
			seen[key] = i
		}
	}
	for i, it := range items {
		if it.Resource != "" {
			join(byName, it.Resource, i)
		}
		for _, l := range it.Resolution.Leaves {
			join(byLeaf, l, i)
		}
	}
	groups := map[int][]int{}
	var roots []int
	for i := range items {
		r := find(i)
		if _, ok := groups[r]; !ok {
			roots = append(roots, r)
		}
		groups[r] = append(groups[r], i)
	}
	out := make([][]int, len(roots))
	for k, r := range roots {
		out[k] = groups[r]
	}
	return out
}

// resourceOf is the resource of one group of items: their consumers
// (sorted), their leaves, and the best name any of them suggests.
func resourceOf(items []Placed, members []int) Resource {
	var res Resource
	leaves := map[string]bool{}
	name := ""
	for _, i := range members {
		it := items[i]
		res.Consumers = append(res.Consumers, it.Consumer)
		for _, l := range it.Resolution.Leaves {
			leaves[l] = true
		}
		cand := it.Resource
		if cand == "" {
			cand = it.Resolution.Name
		}
		if better(cand, name) {
			name = cand
		}
	}
	if name == "" {
		name = "res"
	}
	res.Leaves = sortedKeys(leaves)
	res.Name = SanitizeName(name)
	sort.Slice(res.Consumers, func(a, b int) bool {
		ca, cb := res.Consumers[a], res.Consumers[b]
		if ca.Device != cb.Device {
			return ca.Device < cb.Device
		}
		if ca.Addr != cb.Addr {
			return ca.Addr.Less(cb.Addr)
		}
		return strings.Join(ca.IQNs, " ") < strings.Join(cb.IQNs, " ")
	})
	return res
}

// withHash shortens name so that "-" and 6 hex digits of key's hash fit
// in MaxNameLen, and appends them.
func withHash(name, key string) string {
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:])[:6]
	if len(name) > MaxNameLen-len(h)-1 {
		name = strings.TrimRight(name[:MaxNameLen-len(h)-1], "-")
	}
	return name + "-" + h
}

// better reports whether name candidate a beats b: an explicit or LVM
// name over a file system over a disk, then the lexically smaller, so
// the choice does not depend on discovery order.
func better(a, b string) bool {
	if a == "" {
		return false
	}
	if b == "" {
		return true
	}
	ra, rb := rank(a), rank(b)
	if ra != rb {
		return ra < rb
	}
	return a < b
}

func rank(n string) int {
	switch {
	case len(n) > 5 && n[:5] == "disk-":
		return 2
	case len(n) > 3 && n[:3] == "fs-":
		return 1
	}
	// Explicit names, "vg-" and "md-".
	return 0
}
