package ratelimit

// Data-driven traces: every testdata/*.txt file is a script of limiter
// operations, each with the outcome worked out by hand from the rules in docs/config.md ("Rate limiters").
//
// Format, one command per line; '#' starts a comment that runs to the end of
// the line; blank lines are ignored; words are separated by spaces:
//
//	config minsize N                      MinSize(N)
//	config queue N                        Queue(N)
//	config stack N                        Stack(N)
//	config ratio spi=S min_size=N error=E SampleToInsertRatio(S, N, E)
//	config spi=S min_size=N min_diff=A max_diff=B
//	                                      an explicit Config; A and B also take
//	                                      "max" and "-max" for ±math.MaxFloat64
//	config ... -> invalid                 Validate must fail; no limiter until
//	                                      the next valid config
//	insert -> ok                          CanInsert is true; then Insert
//	insert -> blocked                     CanInsert is false; nothing changes
//	sample -> ok | blocked                the same with CanSample and Sample
//	delete                                Delete (no admission involved)
//	reset                                 Reset
//	restore inserts=I samples=S deletes=D Restore(I, S, D)
//	state -> KEY=VALUE ...                assert any subset of:
//	                                        inserts samples deletes size diff
//	                                        insert=ok|blocked sample=ok|blocked
//	                                        spi min_size min_diff max_diff
//
// insert, sample and delete take a repeat count: "sample*10 -> ok" is ten
// lines of "sample -> ok". A config line starts a fresh limiter, so one file
// may hold several independent sections. Every valid config is checked with
// Validate. A query (CanInsert/CanSample) must never change the counters,
// and an admitted operation must move exactly its own counter by one; the
// first mismatch is reported as file:line and stops that file.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// traceFiles are the scripts that must exist; any other *.txt in testdata
// runs too.
var traceFiles = []string{
	"minsize.txt", "queue.txt", "stack.txt", "ratio.txt",
	"deletes.txt", "reset.txt", "restore.txt",
}

func TestTraces(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, p := range paths {
		have[filepath.Base(p)] = true
	}
	for _, name := range traceFiles {
		if !have[name] {
			t.Errorf("testdata/%s is missing", name)
		}
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			checks, err := runTrace(path, f)
			if err != nil {
				t.Fatal(err)
			}
			if checks == 0 {
				t.Fatalf("%s: no checks", path)
			}
			t.Logf("%s: %d checks", path, checks)
		})
	}
}

// TestTraceFailuresNameTheLine makes sure the runner itself catches wrong
// expectations and malformed lines, and points at them.
func TestTraceFailuresNameTheLine(t *testing.T) {
	tests := []struct {
		name, script, want string
	}{
		{"wrong insert", "config queue 1\ninsert -> ok\ninsert -> ok\n",
			"bad.txt:3: insert: admission = blocked, want ok"},
		{"wrong sample", "config minsize 2\n\n# comment\ninsert -> ok\nsample -> ok\n",
			"bad.txt:5: sample: admission = blocked, want ok"},
		{"wrong repeat", "config queue 2\ninsert*3 -> ok\n",
			"bad.txt:2: insert (repetition 3 of 3): admission = blocked, want ok"},
		{"wrong state", "config queue 2\ninsert -> ok\nstate -> inserts=1 diff=2\n",
			"bad.txt:3: state: diff = 1, want 2"},
		{"wrong state admission", "config queue 2\nstate -> sample=ok\n",
			"bad.txt:2: state: sample = blocked, want ok"},
		{"valid config said invalid", "config queue 2 -> invalid\n",
			"bad.txt:1: config: Validate accepted it, want invalid"},
		{"invalid config", "config minsize 0\n",
			"bad.txt:1: config: ratelimit: invalid config"},
		{"op before config", "insert -> ok\n",
			"bad.txt:1: no limiter"},
		{"op after invalid config", "config minsize 0 -> invalid\nreset\n",
			"bad.txt:2: no limiter"},
		{"missing expectation", "config queue 2\ninsert\n",
			"bad.txt:2: insert needs -> ok or -> blocked"},
		{"unknown verb", "config queue 2\npop -> ok\n",
			`bad.txt:2: unknown command "pop"`},
		{"unknown state key", "config queue 2\nstate -> cursor=0\n",
			`bad.txt:2: state: unknown state key "cursor"`},
		{"incomplete explicit config", "config spi=1 min_size=1 min_diff=0\n",
			"bad.txt:1: config needs spi, min_size, min_diff and max_diff"},
		{"bad number", "config queue three\n",
			"bad.txt:1:"},
		{"bad repeat", "config queue 2\ninsert*0 -> ok\n",
			"bad.txt:2: bad repeat count"},
		{"restore missing key", "config queue 2\nrestore inserts=1 samples=0\n",
			"bad.txt:2: restore needs inserts, samples and deletes"},
		{"stray expectation", "config queue 2\nreset -> ok\n",
			"bad.txt:2: reset takes no arguments or expectation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runTrace("bad.txt", strings.NewReader(tt.script))
			if err == nil {
				t.Fatalf("runTrace accepted the script, want error %q", tt.want)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error = %q, want prefix %q", err, tt.want)
			}
		})
	}
}

// runTrace executes one script and returns how many expectations it checked.
func runTrace(name string, r io.Reader) (checks int, err error) {
	var l *Limiter
	sc := bufio.NewScanner(r)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		cmdPart, expPart, hasExp := strings.Cut(line, "->")
		cmd := strings.Fields(cmdPart)
		exp := strings.Fields(expPart)
		if len(cmd) == 0 {
			if hasExp {
				return checks, fmt.Errorf("%s:%d: expectation without a command", name, lineNo)
			}
			continue
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", name, lineNo, fmt.Sprintf(format, args...))
		}
		verb, repeat, err := parseVerb(cmd[0])
		if err != nil {
			return checks, fail("%v", err)
		}
		if verb == "config" {
			cfg, err := parseConfig(cmd[1:])
			if err != nil {
				return checks, fail("%v", err)
			}
			l = nil
			switch {
			case !hasExp:
				if err := cfg.Validate(); err != nil {
					return checks, fail("config: %v", err)
				}
				l = New(cfg)
			case len(exp) == 1 && exp[0] == "invalid":
				if cfg.Validate() == nil {
					return checks, fail("config: Validate accepted it, want invalid")
				}
				checks++
			default:
				return checks, fail("config takes no expectation other than -> invalid")
			}
			continue
		}
		if l == nil {
			return checks, fail("no limiter: %s before a valid config", verb)
		}
		switch verb {
		case "insert", "sample":
			if len(cmd) != 1 || len(exp) != 1 || (exp[0] != "ok" && exp[0] != "blocked") {
				return checks, fail("%s needs -> ok or -> blocked", verb)
			}
			want := exp[0] == "ok"
			for rep := 1; rep <= repeat; rep++ {
				what := verb
				if repeat > 1 {
					what = fmt.Sprintf("%s (repetition %d of %d)", verb, rep, repeat)
				}
				if err := admit(l, verb, want); err != nil {
					return checks, fail("%s: %v", what, err)
				}
				checks++
			}
		case "delete":
			if len(cmd) != 1 || hasExp {
				return checks, fail("delete takes no arguments or expectation")
			}
			for range repeat {
				i0, s0, d0 := l.Counts()
				diff := l.Diff()
				l.Delete()
				if i, s, d := l.Counts(); i != i0 || s != s0 || d != d0+1 {
					return checks, fail("delete: counts = (%d,%d,%d), want (%d,%d,%d)", i, s, d, i0, s0, d0+1)
				}
				if l.Diff() != diff {
					return checks, fail("delete: diff moved from %v to %v", diff, l.Diff())
				}
			}
		case "reset":
			if len(cmd) != 1 || hasExp || repeat != 1 {
				return checks, fail("reset takes no arguments or expectation")
			}
			l.Reset()
			if i, s, d := l.Counts(); i != 0 || s != 0 || d != 0 {
				return checks, fail("reset: counts = (%d,%d,%d), want zeros", i, s, d)
			}
		case "restore":
			if hasExp || repeat != 1 {
				return checks, fail("restore takes no expectation")
			}
			kv, err := parseKV(cmd[1:])
			if err != nil {
				return checks, fail("%v", err)
			}
			var n [3]int64
			for k, key := range []string{"inserts", "samples", "deletes"} {
				v, ok := kv[key]
				if !ok || len(kv) != 3 {
					return checks, fail("restore needs inserts, samples and deletes")
				}
				if n[k], err = strconv.ParseInt(v, 10, 64); err != nil {
					return checks, fail("restore: %v", err)
				}
			}
			l.Restore(n[0], n[1], n[2])
		case "state":
			if len(cmd) != 1 || repeat != 1 || len(exp) == 0 {
				return checks, fail("state needs -> KEY=VALUE ...")
			}
			n, err := checkState(l, exp)
			checks += n
			if err != nil {
				return checks, fail("state: %v", err)
			}
		default:
			return checks, fail("unknown command %q", verb)
		}
	}
	return checks, sc.Err()
}

// parseVerb splits "insert*3" into ("insert", 3).
func parseVerb(word string) (string, int, error) {
	verb, count, ok := strings.Cut(word, "*")
	if !ok {
		return verb, 1, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("bad repeat count in %q", word)
	}
	switch verb {
	case "insert", "sample", "delete":
		return verb, n, nil
	}
	return "", 0, fmt.Errorf("%s takes no repeat count", verb)
}

func parseKV(words []string) (map[string]string, error) {
	kv := map[string]string{}
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("want KEY=VALUE, got %q", w)
		}
		if _, dup := kv[k]; dup {
			return nil, fmt.Errorf("%s given twice", k)
		}
		kv[k] = v
	}
	return kv, nil
}

// parseFloat reads a float64; "max" and "-max" stand for ±math.MaxFloat64.
func parseFloat(s string) (float64, error) {
	switch s {
	case "max", "+max":
		return math.MaxFloat64, nil
	case "-max":
		return -math.MaxFloat64, nil
	}
	return strconv.ParseFloat(s, 64)
}

func parseConfig(args []string) (Config, error) {
	if len(args) == 0 {
		return Config{}, errors.New("config needs arguments")
	}
	switch args[0] {
	case "minsize", "queue", "stack":
		if len(args) != 2 {
			return Config{}, fmt.Errorf("config %s needs one integer", args[0])
		}
		n, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return Config{}, fmt.Errorf("config %s: %v", args[0], err)
		}
		switch args[0] {
		case "minsize":
			return MinSize(n), nil
		case "queue":
			return Queue(n), nil
		default:
			return Stack(n), nil
		}
	case "ratio":
		kv, err := parseKV(args[1:])
		if err != nil {
			return Config{}, err
		}
		if len(kv) != 3 || kv["spi"] == "" || kv["min_size"] == "" || kv["error"] == "" {
			return Config{}, errors.New("config ratio needs spi, min_size and error")
		}
		spi, err1 := parseFloat(kv["spi"])
		n, err2 := strconv.ParseInt(kv["min_size"], 10, 64)
		e, err3 := parseFloat(kv["error"])
		if err := errors.Join(err1, err2, err3); err != nil {
			return Config{}, fmt.Errorf("config ratio: %v", err)
		}
		return SampleToInsertRatio(spi, n, e), nil
	}
	kv, err := parseKV(args)
	if err != nil {
		return Config{}, err
	}
	if len(kv) != 4 || kv["spi"] == "" || kv["min_size"] == "" || kv["min_diff"] == "" || kv["max_diff"] == "" {
		return Config{}, errors.New("config needs spi, min_size, min_diff and max_diff (or minsize/queue/stack/ratio)")
	}
	var c Config
	var err1, err2, err3, err4 error
	c.SamplesPerInsert, err1 = parseFloat(kv["spi"])
	c.MinSizeToSample, err2 = strconv.ParseInt(kv["min_size"], 10, 64)
	c.MinDiff, err3 = parseFloat(kv["min_diff"])
	c.MaxDiff, err4 = parseFloat(kv["max_diff"])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Config{}, fmt.Errorf("config: %v", err)
	}
	return c, nil
}

// admit checks one insert or sample against want and applies it if admitted.
func admit(l *Limiter, verb string, want bool) error {
	i0, s0, d0 := l.Counts()
	var got bool
	if verb == "insert" {
		got = l.CanInsert()
	} else {
		got = l.CanSample()
	}
	if i, s, d := l.Counts(); i != i0 || s != s0 || d != d0 {
		return fmt.Errorf("the query changed the counters")
	}
	if got != want {
		return fmt.Errorf("admission = %s, want %s (inserts=%d samples=%d deletes=%d diff=%v size=%d)",
			okWord(got), okWord(want), i0, s0, d0, l.Diff(), l.Size())
	}
	if !got {
		return nil
	}
	wantI, wantS := i0, s0
	if verb == "insert" {
		l.Insert()
		wantI++
	} else {
		l.Sample()
		wantS++
	}
	if i, s, d := l.Counts(); i != wantI || s != wantS || d != d0 {
		return fmt.Errorf("counts = (%d,%d,%d), want (%d,%d,%d)", i, s, d, wantI, wantS, d0)
	}
	return nil
}

func okWord(b bool) string {
	if b {
		return "ok"
	}
	return "blocked"
}

// checkState compares each KEY=VALUE with the limiter and returns how many it
// checked.
func checkState(l *Limiter, words []string) (int, error) {
	if _, err := parseKV(words); err != nil { // rejects malformed and duplicate keys
		return 0, err
	}
	inserts, samples, deletes := l.Counts()
	cfg := l.Config()
	ints := map[string]int64{
		"inserts": inserts, "samples": samples, "deletes": deletes,
		"size": l.Size(), "min_size": cfg.MinSizeToSample,
	}
	floats := map[string]float64{
		"diff": l.Diff(), "spi": cfg.SamplesPerInsert,
		"min_diff": cfg.MinDiff, "max_diff": cfg.MaxDiff,
	}
	bools := map[string]bool{"insert": l.CanInsert(), "sample": l.CanSample()}
	n := 0
	// Check in the order written so the first mismatch is the one reported.
	for _, w := range words {
		key, val, _ := strings.Cut(w, "=")
		switch {
		case hasKey(ints, key):
			want, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return n, fmt.Errorf("%s: %v", key, err)
			}
			if got := ints[key]; got != want {
				return n, fmt.Errorf("%s = %d, want %d", key, got, want)
			}
		case hasKey(floats, key):
			want, err := parseFloat(val)
			if err != nil {
				return n, fmt.Errorf("%s: %v", key, err)
			}
			if got := floats[key]; got != want {
				return n, fmt.Errorf("%s = %v, want %v", key, got, want)
			}
		case hasKey(bools, key):
			if val != "ok" && val != "blocked" {
				return n, fmt.Errorf("%s wants ok or blocked, got %q", key, val)
			}
			if got := bools[key]; got != (val == "ok") {
				return n, fmt.Errorf("%s = %s, want %s", key, okWord(got), val)
			}
		default:
			return n, fmt.Errorf("unknown state key %q", key)
		}
		n++
	}
	if i, s, d := l.Counts(); i != inserts || s != samples || d != deletes {
		return n, errors.New("the queries changed the counters")
	}
	return n, nil
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}
