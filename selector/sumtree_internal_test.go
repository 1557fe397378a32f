package selector

import (
	"math"
	"math/rand/v2"
	"testing"
)

// checkTree verifies the sum tree of p exactly: every inner node is the
// sum of its children, every leaf holds its key's weight (want), the leaves
// past Len are 0 and the index matches the keys.
func checkTree(t *testing.T, p *prioritized, want map[uint64]float64) {
	t.Helper()
	if len(p.keys) != len(want) || len(p.index) != len(want) {
		t.Fatalf("%d keys, %d indexed, want %d", len(p.keys), len(p.index), len(want))
	}
	for i, key := range p.keys {
		if p.index[key] != i {
			t.Fatalf("index[%d] = %d, want %d", key, p.index[key], i)
		}
		if w := p.tree[p.leaves+i]; w != want[key] {
			t.Fatalf("leaf %d (key %d) = %v, want %v", i, key, w, want[key])
		}
	}
	for i := len(p.keys); i < p.leaves; i++ {
		if p.tree[p.leaves+i] != 0 {
			t.Fatalf("unused leaf %d = %v", i, p.tree[p.leaves+i])
		}
	}
	for j := 1; j < p.leaves; j++ {
		if p.tree[j] != p.tree[2*j]+p.tree[2*j+1] {
			t.Fatalf("node %d = %v, children sum to %v", j, p.tree[j], p.tree[2*j]+p.tree[2*j+1])
		}
	}
}

// TestSumTreeInvariant applies random operations and checks the whole tree
// after each; once every positive weight is gone the total must be exactly
// 0 again, whatever rounding the sums went through.
func TestSumTreeInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := NewPrioritized(0.7, 1).(*prioritized)
	want := make(map[uint64]float64)
	for step := range 5000 {
		key := uint64(rng.IntN(300))
		prio := 0.0
		if rng.IntN(3) > 0 {
			prio = rng.Float64() * math.Pow(10, float64(rng.IntN(20)-10))
		}
		w := 0.0
		if prio != 0 {
			w = math.Pow(prio, 0.7)
		}
		_, present := want[key]
		switch op := rng.IntN(3); {
		case op == 0 && !present:
			if err := p.Insert(key, prio); err != nil {
				t.Fatal(err)
			}
			want[key] = w
		case op == 1 && present:
			if err := p.Update(key, prio); err != nil {
				t.Fatal(err)
			}
			want[key] = w
		case op == 2 && present:
			if err := p.Delete(key); err != nil {
				t.Fatal(err)
			}
			delete(want, key)
		}
		if step%7 == 0 {
			checkTree(t, p, want)
		}
	}
	checkTree(t, p, want)
	// Zero every weight: the total must come back to exactly 0.
	for key := range want {
		if err := p.Update(key, 0); err != nil {
			t.Fatal(err)
		}
		want[key] = 0
	}
	checkTree(t, p, want)
	if p.tree[1] != 0 {
		t.Fatalf("total = %v after zeroing every weight", p.tree[1])
	}
}

// TestFindNeverReturnsZeroWeight builds trees of random weights, many of
// them 0 and of very different magnitudes, and calls find with values of t
// inside, at the edges of and outside [0, total): the leaf returned must
// always have positive weight, and a t strictly inside a leaf's share (by
// a margin far above rounding) must return that leaf.
func TestFindNeverReturnsZeroWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		p := NewPrioritized(1, 1).(*prioritized)
		n := 1 + rng.IntN(100)
		for key := range uint64(n) {
			prio := 0.0
			switch rng.IntN(4) {
			case 0:
				prio = rng.Float64()
			case 1:
				prio = rng.Float64() * 1e-17
			case 2:
				prio = rng.Float64() * 1e17
			}
			if err := p.Insert(key, prio); err != nil {
				t.Fatal(err)
			}
		}
		total := p.tree[1]
		if total == 0 {
			continue
		}
		ts := []float64{
			0, total, math.Nextafter(total, 0), math.Nextafter(total, math.Inf(1)),
			2 * total, -1, math.NaN(), math.Inf(1), math.Inf(-1),
		}
		prefix := 0.0
		for i := range n {
			w := p.tree[p.leaves+i]
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
			if i < 0 || i >= n || p.tree[p.leaves+i] <= 0 {
				t.Fatalf("trial %d: find(%v) = leaf %d of %d with weight %v (total %v)",
					trial, x, i, n, p.tree[p.leaves+i], total)
			}
		}
	}
}
