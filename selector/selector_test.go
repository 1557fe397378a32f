package selector_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/reverie-rl/reverie/selector"
)

func TestNewSpec(t *testing.T) {
	for _, k := range builtins {
		t.Run(k.name, func(t *testing.T) {
			s := mustNew(t, k.spec, 1)
			if got := s.Spec(); got != k.spec {
				t.Errorf("Spec() = %+v, want %+v", got, k.spec)
			}
			if s.Len() != 0 {
				t.Errorf("Len() = %d on a new selector", s.Len())
			}
		})
	}
	s := mustNew(t, selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 0.6}, 1)
	if got := s.Spec().PriorityExponent; got != 0.6 {
		t.Errorf("PriorityExponent = %v, want 0.6", got)
	}
}

func TestConstructors(t *testing.T) {
	tests := []struct {
		s    selector.Selector
		want selector.Spec
	}{
		{selector.NewFIFO(), selector.Spec{Kind: selector.KindFIFO}},
		{selector.NewLIFO(), selector.Spec{Kind: selector.KindLIFO}},
		{selector.NewUniform(1), selector.Spec{Kind: selector.KindUniform}},
		{selector.NewPrioritized(0.5, 1), selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 0.5}},
		{selector.NewHeap(true), selector.Spec{Kind: selector.KindMinHeap}},
		{selector.NewHeap(false), selector.Spec{Kind: selector.KindMaxHeap}},
		{selector.NewMinHeap(), selector.Spec{Kind: selector.KindMinHeap}},
		{selector.NewMaxHeap(), selector.Spec{Kind: selector.KindMaxHeap}},
	}
	for _, tt := range tests {
		if got := tt.s.Spec(); got != tt.want {
			t.Errorf("Spec() = %+v, want %+v", got, tt.want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, spec := range []selector.Spec{
		{Kind: selector.KindUnset},
		{Kind: selector.KindCustom, Name: "mine"},
		{Kind: selector.Kind(99)},
		{Kind: selector.KindPrioritized, PriorityExponent: -1},
		{Kind: selector.KindPrioritized, PriorityExponent: math.NaN()},
		{Kind: selector.KindPrioritized, PriorityExponent: math.Inf(1)},
	} {
		if s, err := selector.New(spec, 1); err == nil {
			t.Errorf("New(%+v) = %v, want an error", spec, s)
		}
	}
}

func TestNewPrioritizedPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewPrioritized(-1, 1) did not panic")
		}
	}()
	selector.NewPrioritized(-1, 1)
}

func TestErrors(t *testing.T) {
	for _, k := range builtins {
		t.Run(k.name, func(t *testing.T) {
			s := mustNew(t, k.spec, 1)
			steps := []struct {
				name string
				do   func() error
				want error
			}{
				{"sample empty", func() error { _, err := s.Sample(); return err }, selector.ErrEmpty},
				{"update missing", func() error { return s.Update(1, 1) }, selector.ErrNotFound},
				{"delete missing", func() error { return s.Delete(1) }, selector.ErrNotFound},
				{"insert NaN", func() error { return s.Insert(1, math.NaN()) }, selector.ErrInvalidPriority},
				{"insert", func() error { return s.Insert(1, 2) }, nil},
				{"insert again", func() error { return s.Insert(1, 3) }, selector.ErrExists},
				{"update NaN", func() error { return s.Update(1, math.NaN()) }, selector.ErrInvalidPriority},
				{"update missing with one present", func() error { return s.Update(2, 1) }, selector.ErrNotFound},
				{"delete missing with one present", func() error { return s.Delete(2) }, selector.ErrNotFound},
				{"update", func() error { return s.Update(1, 4) }, nil},
				{"delete", func() error { return s.Delete(1) }, nil},
				{"delete again", func() error { return s.Delete(1) }, selector.ErrNotFound},
				{"sample emptied", func() error { _, err := s.Sample(); return err }, selector.ErrEmpty},
				{"insert after emptying", func() error { return s.Insert(1, 1) }, nil},
				{"update beyond", func() error { return s.Update(1_000_000, 1) }, selector.ErrNotFound},
				{"delete beyond", func() error { return s.Delete(1_000_000) }, selector.ErrNotFound},
				{"update MaxSlot", func() error { return s.Update(selector.MaxSlot, 1) }, selector.ErrNotFound},
				{"delete MaxSlot", func() error { return s.Delete(selector.MaxSlot) }, selector.ErrNotFound},
				{"update past MaxSlot", func() error { return s.Update(math.MaxUint32, 1) }, selector.ErrNotFound},
				{"delete past MaxSlot", func() error { return s.Delete(math.MaxUint32) }, selector.ErrNotFound},
				{"insert sparse", func() error { return s.Insert(1_000_000, 1) }, nil},
				{"insert sparse again", func() error { return s.Insert(1_000_000, 1) }, selector.ErrExists},
				{"update below sparse", func() error { return s.Update(999_999, 1) }, selector.ErrNotFound},
				{"delete below sparse", func() error { return s.Delete(999_999) }, selector.ErrNotFound},
				{"update sparse", func() error { return s.Update(1_000_000, 1) }, nil},
				{"delete sparse", func() error { return s.Delete(1_000_000) }, nil},
				{"delete sparse again", func() error { return s.Delete(1_000_000) }, selector.ErrNotFound},
			}
			for _, st := range steps {
				if err := st.do(); !errors.Is(err, st.want) || (st.want == nil) != (err == nil) {
					t.Fatalf("%s: got %v, want %v", st.name, err, st.want)
				}
			}
			if c := mustSample(t, s); c.Slot != 1 || c.Probability != 1 {
				t.Errorf("Sample() = %+v, want slot 1 with probability 1", c)
			}
			if s.Len() != 1 {
				t.Errorf("Len() = %d, want 1", s.Len())
			}
		})
	}
}

// TestInsertPastMaxSlot checks that Insert panics on a slot above MaxSlot,
// a slot no table hands out, rather than allocating for it.
func TestInsertPastMaxSlot(t *testing.T) {
	for _, k := range builtins {
		t.Run(k.name, func(t *testing.T) {
			s := mustNew(t, k.spec, 1)
			defer func() {
				if recover() == nil {
					t.Error("Insert(MaxSlot+1) did not panic")
				}
			}()
			_ = s.Insert(selector.MaxSlot+1, 1)
		})
	}
}

func TestClear(t *testing.T) {
	for _, k := range builtins {
		t.Run(k.name, func(t *testing.T) {
			s := mustNew(t, k.spec, 1)
			for slot := range selector.Slot(100) {
				mustInsert(t, s, slot, float64(slot%7))
			}
			mustInsert(t, s, 1_000_000, 1)
			s.Clear()
			if s.Len() != 0 {
				t.Fatalf("Len() = %d after Clear", s.Len())
			}
			if _, err := s.Sample(); !errors.Is(err, selector.ErrEmpty) {
				t.Fatalf("Sample after Clear: %v, want ErrEmpty", err)
			}
			if err := s.Delete(5); !errors.Is(err, selector.ErrNotFound) {
				t.Fatalf("Delete after Clear: %v, want ErrNotFound", err)
			}
			mustInsert(t, s, 5, 1)
			mustInsert(t, s, 6, 1)
			if s.Len() != 2 {
				t.Fatalf("Len() = %d, want 2", s.Len())
			}
			if got := s.Spec(); got != k.spec {
				t.Errorf("Spec() = %+v after Clear, want %+v", got, k.spec)
			}
		})
	}
}

func TestCheckPriority(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	values := []float64{nan, -1, inf, -inf, 0, 1, 1e300, math.Copysign(0, -1)}
	// accepted(kind)[i] tells whether values[i] is accepted: every kind but
	// Prioritized accepts every number.
	accepted := func(kind string) []bool {
		if kind == "prioritized" {
			return []bool{false, false, false, false, true, true, false, true}
		}
		return []bool{false, true, true, true, true, true, true, true}
	}
	for _, k := range builtins {
		t.Run(k.name, func(t *testing.T) {
			s := mustNew(t, k.spec, 1)
			for i, p := range values {
				err := s.CheckPriority(p)
				if ok := accepted(k.name)[i]; ok != (err == nil) {
					t.Errorf("CheckPriority(%v) = %v, want accepted=%v", p, err, ok)
					continue
				}
				if err == nil {
					continue
				}
				if !errors.Is(err, selector.ErrInvalidPriority) {
					t.Errorf("CheckPriority(%v) = %v, want ErrInvalidPriority", p, err)
				}
				if want := fmt.Sprint(p); !strings.Contains(err.Error(), want) {
					t.Errorf("CheckPriority(%v) = %q, does not name %s", p, err, want)
				}
				// Insert must reject it too, changing nothing.
				if err := s.Insert(selector.Slot(i), p); !errors.Is(err, selector.ErrInvalidPriority) {
					t.Errorf("Insert(%v) = %v, want ErrInvalidPriority", p, err)
				}
				if s.Len() != 0 {
					t.Fatalf("Len() = %d after a rejected Insert", s.Len())
				}
			}
		})
	}
}
