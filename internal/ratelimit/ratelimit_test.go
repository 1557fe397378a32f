package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

// snapshot is everything observable about a limiter at one point.
type snapshot struct {
	inserts, samples, deletes int64
	size                      int64
	diff                      float64
	canInsert, canSample      bool
}

func observe(l *Limiter) snapshot {
	i, s, d := l.Counts()
	return snapshot{
		inserts: i, samples: s, deletes: d,
		size:      l.Size(),
		diff:      l.Diff(),
		canInsert: l.CanInsert(),
		canSample: l.CanSample(),
	}
}

// step is one action of a table-driven scenario.
type step struct {
	op    string // "insert", "sample", "delete", "reset", "restore", "check"
	admit bool   // insert/sample: the admission CanInsert/CanSample must report
	n     int    // repetitions; 0 means once
	want  snapshot
	// restore arguments
	ri, rs, rd int64
}

func ins(admit bool) step        { return step{op: "insert", admit: admit} }
func insN(n int) step            { return step{op: "insert", admit: true, n: n} }
func smp(admit bool) step        { return step{op: "sample", admit: admit} }
func smpN(n int) step            { return step{op: "sample", admit: true, n: n} }
func del() step                  { return step{op: "delete"} }
func rst() step                  { return step{op: "reset"} }
func restore(i, s, d int64) step { return step{op: "restore", ri: i, rs: s, rd: d} }
func check(want snapshot) step   { return step{op: "check", want: want} }
func admitStr(b bool) string     { return map[bool]string{true: "ok", false: "blocked"}[b] }
func (s snapshot) String() string {
	return fmt.Sprintf("inserts=%d samples=%d deletes=%d size=%d diff=%v insert=%s sample=%s",
		s.inserts, s.samples, s.deletes, s.size, s.diff, admitStr(s.canInsert), admitStr(s.canSample))
}

// runSteps drives a fresh limiter through steps. Every query is also checked
// to leave the counters alone, and every admitted operation to move exactly
// one counter by one.
func runSteps(t *testing.T, cfg Config, steps []step) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config %+v: %v", cfg, err)
	}
	l := New(cfg)
	for idx, st := range steps {
		reps := max(st.n, 1)
		for r := 0; r < reps; r++ {
			where := fmt.Sprintf("step %d (%s", idx, st.op)
			if reps > 1 {
				where += fmt.Sprintf(", repetition %d of %d", r+1, reps)
			}
			where += ")"
			i0, s0, d0 := l.Counts()
			switch st.op {
			case "insert", "sample":
				var got bool
				if st.op == "insert" {
					got = l.CanInsert()
				} else {
					got = l.CanSample()
				}
				if i, s, d := l.Counts(); i != i0 || s != s0 || d != d0 {
					t.Fatalf("%s: Can%s changed counters", where, st.op)
				}
				if got != st.admit {
					t.Fatalf("%s: admission = %s, want %s; state %v", where, admitStr(got), admitStr(st.admit), observe(l))
				}
				if !got {
					continue
				}
				wantI, wantS := i0, s0
				if st.op == "insert" {
					l.Insert()
					wantI++
				} else {
					l.Sample()
					wantS++
				}
				if i, s, d := l.Counts(); i != wantI || s != wantS || d != d0 {
					t.Fatalf("%s: counts = (%d,%d,%d), want (%d,%d,%d)", where, i, s, d, wantI, wantS, d0)
				}
			case "delete":
				diff := l.Diff()
				l.Delete()
				if i, s, d := l.Counts(); i != i0 || s != s0 || d != d0+1 {
					t.Fatalf("%s: counts = (%d,%d,%d), want (%d,%d,%d)", where, i, s, d, i0, s0, d0+1)
				}
				if l.Diff() != diff {
					t.Fatalf("%s: delete moved diff from %v to %v", where, diff, l.Diff())
				}
			case "reset":
				l.Reset()
			case "restore":
				l.Restore(st.ri, st.rs, st.rd)
			case "check":
				if got := observe(l); got != st.want {
					t.Fatalf("%s:\n got %v\nwant %v", where, got, st.want)
				}
			default:
				t.Fatalf("%s: unknown op", where)
			}
			if l.Config() != cfg {
				t.Fatalf("%s: config changed to %+v", where, l.Config())
			}
		}
	}
}

func TestPresets(t *testing.T) {
	tests := []struct {
		name string
		got  Config
		want Config
	}{
		{"MinSize(1)", MinSize(1), Config{1, 1, -math.MaxFloat64, math.MaxFloat64}},
		{"MinSize(100)", MinSize(100), Config{1, 100, -math.MaxFloat64, math.MaxFloat64}},
		// offset = spi*min_size = 8; range = [8-5, 8+5].
		{"SampleToInsertRatio(4,2,5)", SampleToInsertRatio(4, 2, 5), Config{4, 2, 3, 13}},
		// offset = 0.5*10 = 5; range = [5-1.5, 5+1.5].
		{"SampleToInsertRatio(0.5,10,1.5)", SampleToInsertRatio(0.5, 10, 1.5), Config{0.5, 10, 3.5, 6.5}},
		// offset = 1.5*1 = 1.5; a zero buffer pins the diff to the offset.
		{"SampleToInsertRatio(1.5,1,0)", SampleToInsertRatio(1.5, 1, 0), Config{1.5, 1, 1.5, 1.5}},
		{"Queue(3)", Queue(3), Config{1, 1, 0, 3}},
		{"Queue(1)", Queue(1), Config{1, 1, 0, 1}},
		{"Stack(3)", Stack(3), Config{1, 1, 0, 3}},
		{"Stack(7)==Queue(7)", Stack(7), Queue(7)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %+v, want %+v", tt.got, tt.want)
			}
			if err := tt.got.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			if New(tt.got).Config() != tt.got {
				t.Errorf("New(cfg).Config() != cfg")
			}
		})
	}
}

func TestAdmission(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		// ---- MinSize ----
		{
			name: "MinSize(3) blocks samples until 3 items",
			cfg:  MinSize(3),
			steps: []step{
				check(snapshot{canInsert: true}),
				smp(false), ins(true), // size 1
				smp(false), ins(true), // size 2
				smp(false), ins(true), // size 3
				smp(true), smpN(999), // any number of samples once at min size
				check(snapshot{inserts: 3, samples: 1000, size: 3, diff: -997, canInsert: true, canSample: true}),
			},
		},
		{
			name: "MinSize(3) never blocks inserts",
			cfg:  MinSize(3),
			steps: []step{
				insN(10000), // diff 10000, never above MaxFloat64
				check(snapshot{inserts: 10000, size: 10000, diff: 10000, canInsert: true, canSample: true}),
				smpN(20000), // diff -10000, never below -MaxFloat64
				check(snapshot{inserts: 10000, samples: 20000, size: 10000, diff: -10000, canInsert: true, canSample: true}),
				insN(5),
			},
		},
		{
			name: "MinSize(1) admits the first sample after one insert",
			cfg:  MinSize(1),
			steps: []step{
				smp(false), ins(true), smp(true),
			},
		},
		{
			name: "MinSize(2) deletes below min size block samples, inserts stay open",
			cfg:  MinSize(2),
			steps: []step{
				insN(2), smp(true),
				del(), // size 1 < 2
				check(snapshot{inserts: 2, samples: 1, deletes: 1, size: 1, diff: 1, canInsert: true}),
				smp(false), ins(true), smp(true),
			},
		},

		// ---- Queue / Stack ----
		{
			name: "Queue(3) without deletes",
			cfg:  Queue(3),
			steps: []step{
				smp(false),                      // size 0
				ins(true),                       // free: 0+1-0 <= 1
				ins(true),                       // diff after 2 <= 3
				ins(true),                       // diff after 3 <= 3
				ins(false),                      // diff after 4 > 3
				smp(true), smp(true), smp(true), // diff 3 -> 0
				smp(false), // size 3 >= 1, but 0-1 < 0: nothing unsampled
				check(snapshot{inserts: 3, samples: 3, size: 3, diff: 0, canInsert: true}),
				insN(3), ins(false),
			},
		},
		{
			name: "Queue(3) as a queue table uses it (max_times_sampled=1)",
			cfg:  Queue(3),
			steps: []step{
				insN(3), ins(false),
				smp(true), del(), // consumed: size 2, diff 2
				check(snapshot{inserts: 3, samples: 1, deletes: 1, size: 2, diff: 2, canInsert: true, canSample: true}),
				ins(true), ins(false),
				smp(true), del(), smp(true), del(), smp(true), del(), // drain
				check(snapshot{inserts: 4, samples: 4, deletes: 4, size: 0, diff: 0, canInsert: true}),
				smp(false),
			},
		},
		{
			name: "Queue(1) holds one unsampled item",
			cfg:  Queue(1),
			steps: []step{
				ins(true), ins(false), smp(true), smp(false), ins(true), ins(false),
			},
		},
		{
			name: "Stack(2) has the queue arithmetic",
			cfg:  Stack(2),
			steps: []step{
				ins(true), ins(true), ins(false),
				smp(true), del(), ins(true), ins(false),
				smp(true), del(), smp(true), del(), smp(false),
				check(snapshot{inserts: 3, samples: 3, deletes: 3, size: 0, diff: 0, canInsert: true}),
			},
		},

		// ---- SampleToInsertRatio, scalar error buffer ----
		{
			// min_diff = 4*2-5 = 3, max_diff = 4*2+5 = 13.
			name: "SampleToInsertRatio(4,2,5)",
			cfg:  SampleToInsertRatio(4, 2, 5),
			steps: []step{
				smp(false),
				ins(true),            // free (size 1 <= 2); diff 4
				smp(false),           // size 1 < 2, although 4-1 >= 3
				ins(true),            // free (size 2 <= 2); diff 8
				ins(true),            // 12 <= 13; diff 12
				ins(false),           // 16 > 13
				smp(true),            // 11 >= 3
				ins(false),           // 15 > 13
				smp(true), smp(true), // diff 9
				ins(true),  // 13 <= 13
				smpN(10),   // diff 13 -> 3
				smp(false), // 2 < 3
				check(snapshot{inserts: 4, samples: 13, size: 4, diff: 3, canInsert: true}),
			},
		},
		{
			// min_diff = 0.5*10-1.5 = 3.5, max_diff = 0.5*10+1.5 = 6.5.
			name: "SampleToInsertRatio(0.5,10,1.5)",
			cfg:  SampleToInsertRatio(0.5, 10, 1.5),
			steps: []step{
				insN(10),   // all free; diff 5
				smp(true),  // 4 >= 3.5
				smp(false), // 3 < 3.5
				ins(true),  // 11 > 10; 5.5-1 = 4.5 <= 6.5
				smp(true),  // 3.5 >= 3.5
				smp(false),
				insN(6),    // diff 3.5 -> 6.5
				ins(false), // 7 > 6.5
				check(snapshot{inserts: 17, samples: 2, size: 17, diff: 6.5, canSample: true}),
			},
		},

		// ---- explicit (min_diff, max_diff), ported from rate_limiter_test.cc ----
		{
			name: "samples blocked until min inserts reached",
			cfg:  Config{SamplesPerInsert: 1, MinSizeToSample: 2, MinDiff: -1, MaxDiff: 1},
			steps: []step{
				smp(false), ins(true), smp(false), ins(true), smp(true),
			},
		},
		{
			name: "operations within the buffer are not blocked",
			cfg:  Config{SamplesPerInsert: 1.5, MinSizeToSample: 1, MinDiff: -3, MaxDiff: 3.1},
			steps: []step{
				ins(true), // free; diff 1.5
				ins(true), // 3.0 <= 3.1
				smpN(6),   // diff 3 -> -3
				check(snapshot{inserts: 2, samples: 6, size: 2, diff: -3, canInsert: true}),
			},
		},
		{
			name: "calls beyond min and max diff are blocked",
			cfg:  Config{SamplesPerInsert: 1.5, MinSizeToSample: 2, MinDiff: -1, MaxDiff: 3},
			steps: []step{
				smp(false),
				ins(true), // diff 1.5
				smp(false),
				ins(true),  // diff 3
				smp(true),  // diff 2
				ins(false), // 4.5-1 = 3.5 > 3
				smp(true),  // diff 1
				ins(true),  // 4.5-2 = 2.5 <= 3
			},
		},
		{
			name: "sample budget of one item with min_diff -1",
			cfg:  Config{SamplesPerInsert: 1, MinSizeToSample: 1, MinDiff: -1, MaxDiff: 1},
			steps: []step{
				smp(false), ins(true),
				smp(true),  // diff 0
				smp(true),  // diff -1
				smp(false), // -2 < -1
			},
		},
		{
			name: "min size and buffer together bound inserts",
			cfg:  Config{SamplesPerInsert: 1.5, MinSizeToSample: 2, MinDiff: 0, MaxDiff: 5},
			steps: []step{
				ins(true),            // free; 1.5
				ins(true),            // free; 3.0
				ins(true),            // 4.5 <= 5
				ins(false),           // 6.0 > 5
				smp(true), smp(true), // diff 2.5
				ins(true),  // 4.0 <= 5
				ins(false), // 5.5 > 5
			},
		},
		{
			name: "min_diff equal to max_diff",
			cfg:  Config{SamplesPerInsert: 1, MinSizeToSample: 1, MinDiff: 1, MaxDiff: 1},
			steps: []step{
				ins(true),  // free; diff 1
				smp(false), // 0 < 1
				ins(false), // 2 > 1
			},
		},

		// ---- deletes ----
		{
			name: "delete re-opens free inserts when size drops to min size",
			cfg:  Config{SamplesPerInsert: 5, MinSizeToSample: 2, MinDiff: 0, MaxDiff: 5},
			steps: []step{
				ins(true), ins(true), // free; diff 10
				ins(false), // 15 > 5
				smp(true),  // diff 9
				ins(false), // 14 > 5
				del(),      // size 1, diff still 9
				ins(true),  // 3-1 = 2 <= 2: free although diff after is 14
				ins(false), // 4-1 = 3 > 2 and 19 > 5
			},
		},
		{
			name: "delete below min size blocks samples until a real insert",
			cfg:  Config{SamplesPerInsert: 5, MinSizeToSample: 2, MinDiff: 0, MaxDiff: 5},
			steps: []step{
				ins(true), ins(true), smp(true), // diff 9
				del(),      // size 1 < 2
				smp(false), // blocked by size, not by diff (9-1 = 8 >= 0)
				check(snapshot{inserts: 2, samples: 1, deletes: 1, size: 1, diff: 9, canInsert: true}),
				ins(true), // size 2
				smp(true),
			},
		},
		{
			name: "explicit delete of an unsampled queue item keeps its slot",
			cfg:  Queue(3),
			steps: []step{
				insN(3), del(), // size 2, diff 3
				ins(false),                         // 4-1 = 3 > 1 and 4 > 3
				smp(true), del(), smp(true), del(), // size 0, diff 1
				smp(false), // size 0
				ins(true),  // free: 4-3 = 1 <= 1; diff 2
				ins(true),  // 3 <= 3
				ins(false), // table holds 2 items but diff after would be 4
				check(snapshot{inserts: 5, samples: 2, deletes: 3, size: 2, diff: 3, canSample: true}),
			},
		},

		// ---- reset / restore ----
		{
			name: "reset zeroes counters",
			cfg:  Queue(2),
			steps: []step{
				insN(2), ins(false), smp(true), del(),
				check(snapshot{inserts: 2, samples: 1, deletes: 1, size: 1, diff: 1, canInsert: true, canSample: true}),
				rst(),
				check(snapshot{canInsert: true}),
				insN(2), ins(false),
			},
		},
		{
			name: "reset re-opens free inserts of a saturated ratio limiter",
			cfg:  SampleToInsertRatio(4, 2, 5),
			steps: []step{
				insN(3), ins(false), // diff 12
				rst(),
				smp(false), insN(3), ins(false),
			},
		},
		{
			name: "restore from a checkpoint",
			cfg:  Config{SamplesPerInsert: 1.5, MinSizeToSample: 2, MinDiff: 0, MaxDiff: 5},
			steps: []step{
				restore(2, 1, 1), // size 1, diff 2
				check(snapshot{inserts: 2, samples: 1, deletes: 1, size: 1, diff: 2, canInsert: true}),
				ins(true), // free: 3-1 = 2 <= 2; diff 3.5
				smp(true), // 2.5 >= 0
				check(snapshot{inserts: 3, samples: 2, deletes: 1, size: 2, diff: 2.5, canInsert: true, canSample: true}),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, tt.cfg, tt.steps) })
	}
}

// TestCheckpointCounts follows Reverb's checkpoint tests: the counters a
// checkpoint would store, and a limiter restored from them that carries on.
func TestCheckpointCounts(t *testing.T) {
	cfg := Config{SamplesPerInsert: 1.5, MinSizeToSample: 2, MinDiff: 0, MaxDiff: 5}
	l := New(cfg)
	if i, s, d := l.Counts(); i != 0 || s != 0 || d != 0 {
		t.Fatalf("fresh Counts = (%d,%d,%d), want zeros", i, s, d)
	}
	for range 2 {
		if !l.CanInsert() {
			t.Fatal("CanInsert = false before min size")
		}
		l.Insert()
	}
	if !l.CanSample() {
		t.Fatal("CanSample = false at min size")
	}
	l.Sample()
	l.Delete()
	i, s, d := l.Counts()
	if i != 2 || s != 1 || d != 1 {
		t.Fatalf("Counts = (%d,%d,%d), want (2,1,1)", i, s, d)
	}

	restored := New(l.Config())
	restored.Restore(i, s, d)
	if restored.Config() != cfg || restored.Diff() != l.Diff() || restored.Size() != l.Size() {
		t.Fatalf("restored limiter differs: cfg %+v diff %v size %d", restored.Config(), restored.Diff(), restored.Size())
	}
	if !restored.CanInsert() {
		t.Fatal("restored CanInsert = false")
	}
	restored.Insert()
	if !restored.CanSample() {
		t.Fatal("restored CanSample = false")
	}
	restored.Sample()
	if i, s, d := restored.Counts(); i != 3 || s != 2 || d != 1 {
		t.Fatalf("restored Counts = (%d,%d,%d), want (3,2,1)", i, s, d)
	}
	// The original is untouched.
	if i, s, d := l.Counts(); i != 2 || s != 1 || d != 1 {
		t.Fatalf("original Counts = (%d,%d,%d), want (2,1,1)", i, s, d)
	}

	restored.Reset()
	if got := observe(restored); got != observe(New(cfg)) {
		t.Fatalf("after Reset: %v, want a fresh limiter", got)
	}
}

// TestRestoreLargeCounters checks admission on counters far beyond what a
// test could reach one call at a time.
func TestRestoreLargeCounters(t *testing.T) {
	tests := []struct {
		name                 string
		cfg                  Config
		i, s, d              int64
		canInsert, canSample bool
	}{
		{"MinSize, samples far ahead of inserts", MinSize(10), 1 << 20, 1 << 50, (1 << 20) - 10, true, true},
		{"MinSize, inserts far ahead of samples", MinSize(10), 1 << 50, 0, (1 << 50) - 9, true, false},
		{"Queue saturated", Queue(5), 1 << 40, (1 << 40) - 5, (1 << 40) - 5, false, true},
		{"Queue drained", Queue(5), 1 << 40, 1 << 40, 1 << 40, true, false},
		{"ratio in balance", SampleToInsertRatio(4, 2, 5), 1 << 30, 4*(1<<30) - 8, (1 << 30) - 100, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(tt.cfg)
			l.Restore(tt.i, tt.s, tt.d)
			if i, s, d := l.Counts(); i != tt.i || s != tt.s || d != tt.d {
				t.Fatalf("Counts = (%d,%d,%d), want (%d,%d,%d)", i, s, d, tt.i, tt.s, tt.d)
			}
			if got := l.Size(); got != tt.i-tt.d {
				t.Errorf("Size = %d, want %d", got, tt.i-tt.d)
			}
			if got := l.CanInsert(); got != tt.canInsert {
				t.Errorf("CanInsert = %v, want %v", got, tt.canInsert)
			}
			if got := l.CanSample(); got != tt.canSample {
				t.Errorf("CanSample = %v, want %v", got, tt.canSample)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Config{SamplesPerInsert: 1, MinSizeToSample: 1, MinDiff: 0, MaxDiff: 1}
	with := func(f func(*Config)) Config { c := ok; f(&c); return c }
	nan := math.NaN()
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; "" means valid
	}{
		{"base", ok, ""},
		{"MinSize(1)", MinSize(1), ""},
		{"Queue(1)", Queue(1), ""},
		{"Stack(100)", Stack(100), ""},
		{"ratio 0.5/10/1.1", SampleToInsertRatio(0.5, 10, 1.1), ""},
		{"ratio 1/10/100", SampleToInsertRatio(1, 10, 100), ""},
		{"explicit range 7..12", Config{1, 10, 7, 12}, ""},
		{"min_diff == max_diff", with(func(c *Config) { c.MinDiff, c.MaxDiff = 2, 2 }), ""},
		{"tiny positive spi", with(func(c *Config) { c.SamplesPerInsert = math.SmallestNonzeroFloat64 }), ""},

		{"spi zero", with(func(c *Config) { c.SamplesPerInsert = 0 }), "samples_per_insert"},
		{"spi negative zero", with(func(c *Config) { c.SamplesPerInsert = math.Copysign(0, -1) }), "samples_per_insert"},
		{"spi negative", with(func(c *Config) { c.SamplesPerInsert = -1 }), "samples_per_insert"},
		{"spi -Inf", with(func(c *Config) { c.SamplesPerInsert = math.Inf(-1) }), "samples_per_insert"},
		{"spi NaN", with(func(c *Config) { c.SamplesPerInsert = nan }), "samples_per_insert"},
		{"ratio spi 0", SampleToInsertRatio(0, 10, 100), "samples_per_insert"},
		{"ratio spi -1", SampleToInsertRatio(-1, 10, 100), "samples_per_insert"},
		{"min_size zero", with(func(c *Config) { c.MinSizeToSample = 0 }), "min_size_to_sample"},
		{"min_size negative", with(func(c *Config) { c.MinSizeToSample = -1 }), "min_size_to_sample"},
		{"MinSize(0)", MinSize(0), "min_size_to_sample"},
		{"MinSize(-1)", MinSize(-1), "min_size_to_sample"},
		{"ratio min_size 0", Config{1, 0, -100, 100}, "min_size_to_sample"},
		{"min_diff NaN", with(func(c *Config) { c.MinDiff = nan }), "min_diff is NaN"},
		{"max_diff NaN", with(func(c *Config) { c.MaxDiff = nan }), "max_diff is NaN"},
		{"ratio error buffer NaN", SampleToInsertRatio(1, 1, nan), "min_diff is NaN"},
		{"min_diff > max_diff", with(func(c *Config) { c.MinDiff, c.MaxDiff = 2, 1 }), "min_diff (2) must be <= max_diff (1)"},
		{"negative error buffer", SampleToInsertRatio(1, 1, -1), "must be <= max_diff"},
		{"Queue(-1)", Queue(-1), "must be <= max_diff"},
		// The first bad field is the one reported.
		{"spi and min_size both bad", Config{0, 0, 2, 1}, "samples_per_insert"},
		{"min_size and diffs both bad", Config{1, 0, 2, 1}, "min_size_to_sample"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", tt.cfg, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want error containing %q", tt.cfg, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v does not wrap ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

// TestAgainstExactModel drives limiters through random operations and
// compares every answer with the rate limiter rules (docs/config.md, "Rate limiters") evaluated in exact
// rational arithmetic. The configs use dyadic fractions and small counters,
// so the float64 implementation has no excuse to round differently.
func TestAgainstExactModel(t *testing.T) {
	configs := []Config{
		MinSize(1), MinSize(3),
		Queue(1), Queue(3), Stack(2),
		SampleToInsertRatio(4, 2, 5),
		SampleToInsertRatio(0.5, 10, 1.5),
		SampleToInsertRatio(0.25, 3, 1),
		{SamplesPerInsert: 1.5, MinSizeToSample: 2, MinDiff: -1, MaxDiff: 3},
		{SamplesPerInsert: 1.5, MinSizeToSample: 1, MinDiff: -3, MaxDiff: 3.125},
		{SamplesPerInsert: 5, MinSizeToSample: 2, MinDiff: 0, MaxDiff: 5},
		{SamplesPerInsert: 1, MinSizeToSample: 1, MinDiff: 1, MaxDiff: 1},
	}
	rat := func(f float64) *big.Rat { return new(big.Rat).SetFloat64(f) }
	for ci, cfg := range configs {
		t.Run(fmt.Sprintf("%d_%+v", ci, cfg), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ci), 0x5eed))
			spi, minDiff, maxDiff := rat(cfg.SamplesPerInsert), rat(cfg.MinDiff), rat(cfg.MaxDiff)
			var ins, smp, dels int64
			diffAt := func(i, s int64) *big.Rat { // i*spi - s
				d := new(big.Rat).Mul(new(big.Rat).SetInt64(i), spi)
				return d.Sub(d, new(big.Rat).SetInt64(s))
			}
			l := New(cfg)
			for n := range 5000 {
				wantSample := ins-dels >= cfg.MinSizeToSample &&
					diffAt(ins, smp+1).Cmp(minDiff) >= 0
				wantInsert := ins+1-dels <= cfg.MinSizeToSample ||
					diffAt(ins+1, smp).Cmp(maxDiff) <= 0
				wantDiff, _ := diffAt(ins, smp).Float64()
				if got := l.CanSample(); got != wantSample {
					t.Fatalf("op %d (%d,%d,%d): CanSample = %v, want %v", n, ins, smp, dels, got, wantSample)
				}
				if got := l.CanInsert(); got != wantInsert {
					t.Fatalf("op %d (%d,%d,%d): CanInsert = %v, want %v", n, ins, smp, dels, got, wantInsert)
				}
				if got := l.Diff(); got != wantDiff {
					t.Fatalf("op %d (%d,%d,%d): Diff = %v, want %v", n, ins, smp, dels, got, wantDiff)
				}
				if got := l.Size(); got != ins-dels {
					t.Fatalf("op %d: Size = %d, want %d", n, got, ins-dels)
				}
				switch r := rng.IntN(100); {
				case r < 40:
					if wantInsert {
						l.Insert()
						ins++
					}
				case r < 80:
					if wantSample {
						l.Sample()
						smp++
					}
				case r < 97:
					if ins-dels > 0 {
						l.Delete()
						dels++
					}
				case r < 98:
					l.Reset()
					ins, smp, dels = 0, 0, 0
				default:
					i := rng.Int64N(50)
					s, d := rng.Int64N(200), rng.Int64N(i+1)
					l.Restore(i, s, d)
					ins, smp, dels = i, s, d
				}
				if i, s, d := l.Counts(); i != ins || s != smp || d != dels {
					t.Fatalf("op %d: Counts = (%d,%d,%d), want (%d,%d,%d)", n, i, s, d, ins, smp, dels)
				}
			}
		})
	}
}

// TestProductRoundedFirst: the product inserts*samples_per_insert is
// rounded before the subtraction, as in Reverb. Fused into one
// multiply-subtract (Go may fuse; it does on arm64), 0.1*10 - 1 comes to
// 5.55e-17, not 0, and a SampleToInsertRatio(0.1, 10, 1) table refuses
// its first sample at 10 inserts; and at 49 inserts and 3 samples with
// max_diff 2, 0.1*50 - 3 comes to 2.0000000000000004 and refuses the
// insert. amd64 does not fuse a subtraction, so this test cannot fail
// there; it states the rule for the platforms that do.
func TestProductRoundedFirst(t *testing.T) {
	cfg := SampleToInsertRatio(0.1, 10, 1)
	if cfg.MinDiff != 0 {
		t.Fatalf("SampleToInsertRatio(0.1, 10, 1).MinDiff = %g, want 0", cfg.MinDiff)
	}
	l := New(cfg)
	for range 10 {
		l.Insert()
	}
	if !l.CanSample() {
		t.Fatal("the first sample at 10 inserts is refused")
	}
	l2 := New(Config{SamplesPerInsert: 0.1, MinSizeToSample: 1, MinDiff: 0, MaxDiff: 2})
	for range 49 {
		l2.Insert()
	}
	for range 3 {
		l2.Sample()
	}
	if !l2.CanInsert() {
		t.Fatalf("the 50th insert after 3 samples is refused (diff %g)", l2.Diff())
	}
}
