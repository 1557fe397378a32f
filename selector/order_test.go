package selector_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/reverie-rl/reverie/selector"
)

// step is one operation of an order script, with the slot Sample must
// return after it (or empty, when the selector must be empty).
type step struct {
	op    byte // 'i' insert, 'u' update, 'd' delete
	slot  selector.Slot
	prio  float64
	want  selector.Slot
	empty bool
}

func ins(slot selector.Slot, prio float64, want selector.Slot) step {
	return step{'i', slot, prio, want, false}
}
func upd(slot selector.Slot, prio float64, want selector.Slot) step {
	return step{'u', slot, prio, want, false}
}
func del(slot, want selector.Slot) step { return step{'d', slot, 0, want, false} }
func delLast(slot selector.Slot) step   { return step{'d', slot, 0, 0, true} }

// runScript applies steps to a deterministic selector, checking the sample
// after each.
func runScript(t *testing.T, s selector.Selector, steps []step) {
	t.Helper()
	for i, st := range steps {
		var err error
		switch st.op {
		case 'i':
			err = s.Insert(st.slot, st.prio)
		case 'u':
			err = s.Update(st.slot, st.prio)
		case 'd':
			err = s.Delete(st.slot)
		}
		if err != nil {
			t.Fatalf("step %d (%c %d %v): %v", i, st.op, st.slot, st.prio, err)
		}
		c, err := s.Sample()
		if st.empty {
			if !errors.Is(err, selector.ErrEmpty) {
				t.Fatalf("step %d: Sample() = %+v, %v; want ErrEmpty", i, c, err)
			}
			continue
		}
		if err != nil || c.Slot != st.want || c.Probability != 1 {
			t.Fatalf("step %d (%c %d %v): Sample() = %+v, %v; want slot %d with probability 1",
				i, st.op, st.slot, st.prio, c, err, st.want)
		}
	}
}

func TestFIFOLIFOOrder(t *testing.T) {
	tests := []struct {
		name  string
		new   func() selector.Selector
		steps []step
	}{
		{"fifo/insert", selector.NewFIFO, []step{
			ins(3, 9, 3), ins(1, 0, 3), ins(2, 5, 3),
		}},
		{"fifo/delete", selector.NewFIFO, []step{
			ins(1, 1, 1), ins(2, 1, 1), ins(3, 1, 1), ins(4, 1, 1),
			del(2, 1), del(1, 3), del(4, 3), ins(5, 1, 3), del(3, 5), delLast(5),
		}},
		{"fifo/update does not move", selector.NewFIFO, []step{
			ins(1, 1, 1), ins(2, 1, 1), upd(1, 100, 1), upd(2, -5, 1), upd(1, 0, 1), del(1, 2),
		}},
		{"fifo/reused slots", selector.NewFIFO, []step{
			ins(1, 0, 1), ins(2, 0, 1), del(1, 2), ins(1, 0, 2), ins(3, 0, 2), del(2, 1), del(1, 3), delLast(3),
			ins(7, 0, 7), ins(8, 0, 7), del(7, 8),
		}},
		{"fifo/sparse slots", selector.NewFIFO, []step{
			ins(1_000_000, 0, 1_000_000), ins(0, 0, 1_000_000), ins(5, 0, 1_000_000), del(1_000_000, 0),
			ins(1_000_000, 0, 0), del(0, 5), del(5, 1_000_000), ins(70_000, 0, 1_000_000), del(1_000_000, 70_000), delLast(70_000),
		}},
		{"lifo/insert", selector.NewLIFO, []step{
			ins(3, 9, 3), ins(1, 0, 1), ins(2, 5, 2),
		}},
		{"lifo/delete", selector.NewLIFO, []step{
			ins(1, 1, 1), ins(2, 1, 2), ins(3, 1, 3), ins(4, 1, 4),
			del(3, 4), del(4, 2), ins(5, 1, 5), del(5, 2), del(1, 2), delLast(2),
		}},
		{"lifo/update does not move", selector.NewLIFO, []step{
			ins(1, 1, 1), ins(2, 1, 2), upd(1, 100, 2), upd(2, -5, 2), del(2, 1),
		}},
		{"lifo/sparse slots", selector.NewLIFO, []step{
			ins(1_000_000, 0, 1_000_000), ins(0, 0, 0), ins(5, 0, 5), del(5, 0),
			ins(5, 0, 5), del(0, 5), del(5, 1_000_000), ins(70_000, 0, 70_000), del(70_000, 1_000_000), delLast(1_000_000),
		}},
		{"lifo/reused slots", selector.NewLIFO, []step{
			ins(1, 0, 1), ins(2, 0, 2), del(1, 2), ins(1, 0, 1), ins(3, 0, 3), del(3, 1), del(1, 2), delLast(2),
			ins(7, 0, 7), ins(8, 0, 8), del(8, 7),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runScript(t, tt.new(), tt.steps) })
	}
}

func TestHeapOrder(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name  string
		min   bool
		steps []step
	}{
		{"min/priorities", true, []step{
			ins(1, 5, 1), ins(2, 3, 2), ins(3, 4, 2), ins(4, -1, 4), ins(5, 10, 4),
			del(4, 2), del(2, 3), upd(5, 0, 5), upd(5, 4.5, 3), del(3, 5), del(5, 1), delLast(1),
		}},
		{"min/infinities", true, []step{
			ins(1, inf, 1), ins(2, -inf, 2), ins(3, 0, 2), del(2, 3), del(3, 1),
		}},
		{"min/ties go to the least recently inserted", true, []step{
			ins(1, 2, 1), ins(2, 2, 1), ins(3, 2, 1), del(1, 2), del(2, 3),
		}},
		{"min/update moves behind equal priorities", true, []step{
			ins(1, 2, 1), ins(2, 2, 1), ins(3, 2, 1), upd(1, 2, 2), upd(2, 2, 3), upd(3, 2, 1),
			del(1, 2), ins(4, 2, 2), upd(2, 2, 3), del(3, 4), del(4, 2),
		}},
		{"min/update to a tie from below", true, []step{
			ins(1, 1, 1), ins(2, 2, 1), upd(1, 2, 2), upd(2, 3, 1), upd(2, 2, 1),
		}},
		{"min/zero signs tie", true, []step{
			ins(1, 0, 1), ins(2, math.Copysign(0, -1), 1), upd(1, 0, 2),
		}},
		{"min/reused slot goes behind equal priorities", true, []step{
			ins(1, 2, 1), ins(2, 2, 1), del(1, 2), ins(1, 2, 2), del(2, 1), ins(2, 2, 1), del(1, 2),
		}},
		{"min/sparse slots", true, []step{
			ins(1_000_000, 2, 1_000_000), ins(0, 2, 1_000_000), ins(5, 1, 5), upd(5, 2, 1_000_000),
			del(1_000_000, 0), ins(70_000, -1, 70_000), del(70_000, 0), del(0, 5), delLast(5),
		}},
		{"max/priorities", false, []step{
			ins(1, 5, 1), ins(2, 3, 1), ins(3, 7, 3), ins(4, -1, 3), ins(5, 10, 5),
			del(5, 3), del(3, 1), upd(4, 6, 4), upd(4, -6, 1), del(1, 2), del(2, 4), delLast(4),
		}},
		{"max/infinities", false, []step{
			ins(1, -inf, 1), ins(2, inf, 2), ins(3, 0, 2), del(2, 3), del(3, 1),
		}},
		{"max/ties go to the least recently inserted", false, []step{
			ins(1, 2, 1), ins(2, 2, 1), ins(3, 2, 1), del(1, 2), del(2, 3),
		}},
		{"max/update moves behind equal priorities", false, []step{
			ins(1, 2, 1), ins(2, 2, 1), ins(3, 2, 1), upd(1, 2, 2), upd(2, 2, 3), upd(3, 2, 1),
			del(1, 2), ins(4, 2, 2), upd(2, 2, 3), del(3, 4), del(4, 2),
		}},
		{"max/reused slot goes behind equal priorities", false, []step{
			ins(1, 2, 1), ins(2, 2, 1), del(1, 2), ins(1, 2, 2), del(2, 1), ins(2, 2, 1), del(1, 2),
		}},
		{"max/sparse slots", false, []step{
			ins(1_000_000, 2, 1_000_000), ins(0, 2, 1_000_000), ins(5, 3, 5), upd(5, 2, 1_000_000),
			del(1_000_000, 0), ins(70_000, 9, 70_000), del(70_000, 0), del(0, 5), delLast(5),
		}},
		{"max/update to a tie from above", false, []step{
			ins(1, 3, 1), ins(2, 2, 1), upd(1, 2, 2), upd(2, 1, 1), upd(2, 2, 1),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runScript(t, selector.NewHeap(tt.min), tt.steps) })
	}
}

// TestHeapTiesLarge checks tie-breaking across many equal priorities, where
// the order comes only from the insert/update counter.
func TestHeapTiesLarge(t *testing.T) {
	for _, minHeap := range []bool{true, false} {
		h := selector.NewHeap(minHeap)
		const n = 1000
		for slot := range selector.Slot(n) {
			mustInsert(t, h, slot, 7)
		}
		// Touch the even slots: they go behind the odd ones, in slot order.
		for slot := selector.Slot(0); slot < n; slot += 2 {
			mustUpdate(t, h, slot, 7)
		}
		var want []selector.Slot
		for slot := selector.Slot(1); slot < n; slot += 2 {
			want = append(want, slot)
		}
		for slot := selector.Slot(0); slot < n; slot += 2 {
			want = append(want, slot)
		}
		// Pop the first half and reinsert each popped slot at once: a
		// reused slot goes behind every slot of equal priority.
		for i := range n / 2 {
			c := mustSample(t, h)
			if c.Slot != want[i] {
				t.Fatalf("minHeap=%v: pop %d = %d, want %d", minHeap, i, c.Slot, want[i])
			}
			mustDelete(t, h, c.Slot)
			mustInsert(t, h, c.Slot, 7)
		}
		want = slices.Concat(want[n/2:], want[:n/2])
		for i, w := range want {
			c := mustSample(t, h)
			if c.Slot != w {
				t.Fatalf("minHeap=%v: pop %d = %d, want %d", minHeap, i, c.Slot, w)
			}
			mustDelete(t, h, c.Slot)
		}
	}
}

// TestFIFOOldest checks that Oldest lists the slots a FIFO selector would
// return, one Sample and Delete after another, after inserts and deletes
// in any order.
func TestFIFOOldest(t *testing.T) {
	s := selector.NewFIFO()
	o, ok := s.(selector.Orderer)
	if !ok {
		t.Fatal("FIFO does not implement Orderer")
	}
	o.Oldest(3, func(selector.Slot) { t.Fatal("Oldest of an empty selector called back") })
	rng := rand.New(rand.NewPCG(5, 6))
	present := map[selector.Slot]bool{}
	for i := 0; i < 2000; i++ {
		slot := selector.Slot(rng.IntN(64))
		if present[slot] {
			if err := s.Delete(slot); err != nil {
				t.Fatal(err)
			}
			delete(present, slot)
		} else {
			if err := s.Insert(slot, 0); err != nil {
				t.Fatal(err)
			}
			present[slot] = true
		}
	}
	n := rng.IntN(len(present) + 3) // up to more than held: Oldest stops early
	var got []selector.Slot
	o.Oldest(n, func(s selector.Slot) { got = append(got, s) })
	var want []selector.Slot
	for s.Len() > 0 {
		c, err := s.Sample()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, c.Slot)
		if err := s.Delete(c.Slot); err != nil {
			t.Fatal(err)
		}
	}
	if want = want[:min(n, len(want))]; !slices.Equal(got, want) {
		t.Fatalf("Oldest(%d) = %v\nwant %v", n, got, want)
	}
	got = got[:0]
	o.Oldest(0, func(s selector.Slot) { got = append(got, s) })
	if len(got) != 0 {
		t.Fatalf("Oldest(0) called back %d times", len(got))
	}
}
