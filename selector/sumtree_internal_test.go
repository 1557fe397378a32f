package selector

import (
	"math"
	"math/rand/v2"
	"testing"
)

// checkTree verifies the sum tree of p exactly: the leaves are a power of
// two covering every present slot; every present slot's leaf holds its
// weight (want[slot], NaN when absent) and every other leaf is 0; every
// inner node is the sum of its children, in the order sum adds them; the
// padding is 0; the last level is the single root; and present lists
// exactly the present slots, with pos following them.
func checkTree(t *testing.T, p *prioritized, want []float64) {
	t.Helper()
	n := 0
	for slot, w := range want {
		if math.IsNaN(w) {
			if p.present.has(Slot(slot)) {
				t.Fatalf("slot %d present, want absent", slot)
			}
			continue
		}
		n++
		if !p.present.has(Slot(slot)) {
			t.Fatalf("slot %d absent, want present", slot)
		}
		if slot >= p.capacity() {
			t.Fatalf("slot %d present beyond the %d leaves", slot, p.capacity())
		}
	}
	if len(p.present.slots) != n || p.Len() != n {
		t.Fatalf("%d slots present, Len() = %d, want %d", len(p.present.slots), p.Len(), n)
	}
	for i, slot := range p.present.slots {
		if got := p.present.pos[slot]; got != int32(i) {
			t.Fatalf("pos[%d] = %d, want %d", slot, got, i)
		}
	}
	present := 0
	for _, pos := range p.present.pos {
		if pos != nilSlot {
			present++
		}
	}
	if present != n {
		t.Fatalf("%d positions set, want %d", present, n)
	}
	if len(p.levels) == 0 {
		if n != 0 {
			t.Fatalf("no tree for %d slots", n)
		}
		return
	}
	leaves := p.levels[0]
	if c := len(leaves); c < fanout || c&(c-1) != 0 {
		t.Fatalf("%d leaves, want a power of two >= %d", c, fanout)
	}
	for slot, w := range leaves {
		wantW := 0.0
		if slot < len(want) && !math.IsNaN(want[slot]) {
			wantW = want[slot]
		}
		if w != wantW {
			t.Fatalf("leaf %d = %v, want %v", slot, w, wantW)
		}
	}
	for k := 1; k < len(p.levels); k++ {
		below, level := p.levels[k-1], p.levels[k]
		nodes := (len(below) + fanout - 1) / fanout
		if len(below)%fanout != 0 {
			t.Fatalf("level %d has %d nodes, not a multiple of %d", k-1, len(below), fanout)
		}
		if k == len(p.levels)-1 && len(level) != 1 {
			t.Fatalf("top level %d has %d nodes, want 1", k, len(level))
		}
		for i, v := range level {
			wantV := 0.0
			if i < nodes {
				c := below[i*fanout : i*fanout+fanout]
				// Spelled out rather than calling sum, to check it.
				wantV = ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]))
			}
			if v != wantV {
				t.Fatalf("level %d node %d = %v, want %v", k, i, v, wantV)
			}
		}
	}
}

// absentWeights returns n slots' expected weights, all absent (NaN).
func absentWeights(n int) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = math.NaN()
	}
	return w
}

// TestSumTreeInvariant applies random operations, on dense and on sparse
// slots, and checks the whole tree after each; once every positive weight
// is gone the total must be exactly 0 again, whatever rounding the sums
// went through.
func TestSumTreeInvariant(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slots int // slots are drawn from [0, slots)
		every int // the tree is checked every so many steps
	}{
		{"dense", 300, 7},
		{"sparse", 100_000, 499},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			p := NewPrioritized(0.7, 1).(*prioritized)
			want := absentWeights(tc.slots)
			// pick returns a present slot most of the time once there are
			// some, so that updates and deletes happen on sparse slots too.
			pick := func() Slot {
				if len(p.present.slots) > 0 && rng.IntN(2) == 0 {
					return p.present.slots[rng.IntN(len(p.present.slots))]
				}
				return Slot(rng.IntN(tc.slots))
			}
			for step := range 5000 {
				slot := pick()
				prio := 0.0
				if rng.IntN(3) > 0 {
					prio = rng.Float64() * math.Pow(10, float64(rng.IntN(20)-10))
				}
				w := 0.0
				if prio != 0 {
					w = math.Pow(prio, 0.7)
				}
				present := !math.IsNaN(want[slot])
				switch op := rng.IntN(3); {
				case op == 0 && !present:
					if err := p.Insert(slot, prio); err != nil {
						t.Fatal(err)
					}
					want[slot] = w
				case op == 1 && present:
					if err := p.Update(slot, prio); err != nil {
						t.Fatal(err)
					}
					want[slot] = w
				case op == 2 && present:
					if err := p.Delete(slot); err != nil {
						t.Fatal(err)
					}
					want[slot] = math.NaN()
				}
				if step%tc.every == 0 {
					checkTree(t, p, want)
				}
			}
			checkTree(t, p, want)
			// Zero every weight: the total must come back to exactly 0.
			for _, slot := range p.present.slots {
				if err := p.Update(slot, 0); err != nil {
					t.Fatal(err)
				}
				want[slot] = 0
			}
			checkTree(t, p, want)
			if p.total() != 0 {
				t.Fatalf("total = %v after zeroing every weight", p.total())
			}
			// Delete every slot: the total stays exactly 0.
			for len(p.present.slots) > 0 {
				slot := p.present.slots[0]
				if err := p.Delete(slot); err != nil {
					t.Fatal(err)
				}
				want[slot] = math.NaN()
			}
			checkTree(t, p, want)
			if p.total() != 0 {
				t.Fatalf("total = %v after deleting every slot", p.total())
			}
		})
	}
}

// TestFindNeverReturnsZeroWeight builds trees of random weights, many of
// them 0 and of very different magnitudes, on dense slots or on sparse
// ones (leaving absent, zero leaves between them), and calls find with
// values of t inside, at the edges of and outside [0, total): the leaf
// returned must always be present and have positive weight, and a t
// strictly inside a leaf's share (by a margin far above rounding) must
// return that leaf.
func TestFindNeverReturnsZeroWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 400 {
		p := NewPrioritized(1, 1).(*prioritized)
		n := 1 + rng.IntN(100)
		stride := 1
		if trial%2 == 1 {
			stride = 1 + rng.IntN(300)
		}
		for i := range n {
			prio := 0.0
			switch rng.IntN(4) {
			case 0:
				prio = rng.Float64()
			case 1:
				prio = rng.Float64() * 1e-17
			case 2:
				prio = rng.Float64() * 1e17
			}
			if err := p.Insert(Slot(i*stride), prio); err != nil {
				t.Fatal(err)
			}
		}
		total := p.total()
		if total == 0 {
			continue
		}
		ts := []float64{
			0, total, math.Nextafter(total, 0), math.Nextafter(total, math.Inf(1)),
			2 * total, -1, math.NaN(), math.Inf(1), math.Inf(-1),
		}
		prefix := 0.0
		for i, w := range p.levels[0] {
			ts = append(ts, prefix, math.Nextafter(prefix, 0), math.Nextafter(prefix, math.Inf(1)))
			if w > total*1e-9 {
				mid := prefix + w/2
				if got := p.find(mid); got != i {
					t.Fatalf("trial %d: find(%v) = leaf %d, want %d (share [%v, %v))",
						trial, mid, got, i, prefix, prefix+w)
				}
			}
			prefix += w
		}
		for range 100 {
			ts = append(ts, rng.Float64()*total)
		}
		for _, x := range ts {
			i := p.find(x)
			if i < 0 || i >= p.capacity() || p.levels[0][i] <= 0 || !p.present.has(Slot(i)) {
				t.Fatalf("trial %d: find(%v) = leaf %d of %d with weight %v (total %v)",
					trial, x, i, p.capacity(), p.levels[0][i], total)
			}
		}
	}
}

// TestClearReleases checks that Clear drops every selector's slices.
func TestClearReleases(t *testing.T) {
	fill := func(s Selector) {
		for slot := range Slot(100) {
			if err := s.Insert(slot*7, 1); err != nil {
				t.Fatal(err)
			}
		}
		s.Clear()
	}
	f, l := NewFIFO().(*fifo), NewLIFO().(*lifo)
	u := NewUniform(1).(*uniform)
	p := NewPrioritized(1, 1).(*prioritized)
	h := NewHeap(true).(*priorityHeap)
	for _, s := range []Selector{f, l, u, p, h} {
		fill(s)
	}
	if f.links != nil || l.links != nil || f.head != nilSlot || l.tail != nilSlot {
		t.Error("fifo or lifo keeps its links after Clear")
	}
	if u.set.slots != nil || u.set.pos != nil {
		t.Error("uniform keeps its slices after Clear")
	}
	if p.levels != nil || p.present.slots != nil || p.present.pos != nil {
		t.Error("prioritized keeps its tree after Clear")
	}
	if h.items != nil || h.pos != nil {
		t.Error("heap keeps its slices after Clear")
	}
}

// TestGrowth checks that the slices indexed by slot grow to cover the
// slot inserted, at least doubling, and that the tree's leaves stay a
// power of two.
func TestGrowth(t *testing.T) {
	f := NewFIFO().(*fifo)
	u := NewUniform(1).(*uniform)
	p := NewPrioritized(1, 1).(*prioritized)
	h := NewHeap(false).(*priorityHeap)
	lens := func() []int {
		return []int{len(f.links), len(u.set.pos), len(p.present.pos), len(h.pos), p.capacity()}
	}
	for _, tc := range []struct {
		slot Slot
		want []int
	}{
		{0, []int{16, 16, 16, 16, 16}},
		{15, []int{16, 16, 16, 16, 16}},
		{16, []int{32, 32, 32, 32, 32}},
		{40, []int{64, 64, 64, 64, 64}},
		{1000, []int{1001, 1001, 1001, 1001, 1024}},
		{1001, []int{2002, 2002, 2002, 2002, 1024}},
		{1024, []int{2002, 2002, 2002, 2002, 2048}},
	} {
		for _, s := range []Selector{f, u, p, h} {
			if err := s.Insert(tc.slot, 1); err != nil {
				t.Fatal(err)
			}
		}
		got := lens()
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("after inserting slot %d: lengths %v, want %v", tc.slot, got, tc.want)
			}
		}
	}
}
