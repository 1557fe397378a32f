// Package ratelimit holds the samples-per-insert arithmetic that decides
// whether a table may take one more insert or serve one more sample.
//
// It is Reverb's rate limiter without the waiting: a Limiter is plain data,
// not safe for concurrent use. The table that owns it holds the lock and
// does all the blocking.
package ratelimit

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("ratelimit: invalid config")

// Config is the generic limiter: samples_per_insert, min_size_to_sample,
// min_diff and max_diff, as in Reverb's RateLimiter.
//
// The diff (or cursor) is inserts*SamplesPerInsert - samples. A sample is
// admitted when the table holds at least MinSizeToSample items and the diff
// after the sample stays >= MinDiff. An insert is admitted when the table
// would still hold at most MinSizeToSample items after it, or when the diff
// after it stays <= MaxDiff.
type Config struct {
	SamplesPerInsert float64
	MinSizeToSample  int64
	MinDiff          float64
	MaxDiff          float64
}

// MinSize admits samples once the table holds n items and never blocks
// inserts.
func MinSize(n int64) Config {
	return Config{SamplesPerInsert: 1, MinSizeToSample: n, MinDiff: -math.MaxFloat64, MaxDiff: math.MaxFloat64}
}

// SampleToInsertRatio keeps samples/inserts near spi once the table holds
// minSize items, within errorBuffer samples either way.
func SampleToInsertRatio(spi float64, minSize int64, errorBuffer float64) Config {
	offset := float64(spi * float64(minSize)) // rounded: see Diff
	return Config{SamplesPerInsert: spi, MinSizeToSample: minSize, MinDiff: offset - errorBuffer, MaxDiff: offset + errorBuffer}
}

// Queue admits a sample only when an unsampled item exists and an insert
// only while fewer than size unsampled items exist.
func Queue(size int64) Config {
	return Config{SamplesPerInsert: 1, MinSizeToSample: 1, MinDiff: 0, MaxDiff: float64(size)}
}

// Stack has the same arithmetic as Queue; the table's selectors make it LIFO.
func Stack(size int64) Config { return Queue(size) }

// Validate reports the first field that makes the config unusable: the
// values Reverb's C++ constructor would abort on, NaNs, and an empty diff
// range. Reverb's stricter Python checks of SampleToInsertRatio belong to
// the config loaders.
func (c Config) Validate() error {
	switch {
	case math.IsNaN(c.SamplesPerInsert) || math.IsInf(c.SamplesPerInsert, 0) || c.SamplesPerInsert <= 0:
		return fmt.Errorf("%w: samples_per_insert must be finite and > 0, got %v", ErrInvalidConfig, c.SamplesPerInsert)
	case c.MinSizeToSample < 1:
		return fmt.Errorf("%w: min_size_to_sample must be >= 1, got %d", ErrInvalidConfig, c.MinSizeToSample)
	case math.IsNaN(c.MinDiff):
		return fmt.Errorf("%w: min_diff is NaN", ErrInvalidConfig)
	case math.IsNaN(c.MaxDiff):
		return fmt.Errorf("%w: max_diff is NaN", ErrInvalidConfig)
	case c.MinDiff > c.MaxDiff:
		return fmt.Errorf("%w: min_diff (%v) must be <= max_diff (%v)", ErrInvalidConfig, c.MinDiff, c.MaxDiff)
	}
	return nil
}

// Limiter tracks the counters of one table against its Config. The zero
// value of the counters is a fresh table. Not safe for concurrent use.
type Limiter struct {
	cfg     Config
	inserts int64
	samples int64
	deletes int64
}

// New returns a limiter with zeroed counters. cfg must be valid.
func New(cfg Config) *Limiter { return &Limiter{cfg: cfg} }

// Config returns the limiter's configuration.
func (l *Limiter) Config() Config { return l.cfg }

// Counts returns the inserts, samples and deletes counted since the start or
// the last Reset.
func (l *Limiter) Counts() (inserts, samples, deletes int64) {
	return l.inserts, l.samples, l.deletes
}

// Restore sets the counters, as when a table is loaded from a checkpoint.
func (l *Limiter) Restore(inserts, samples, deletes int64) {
	l.inserts, l.samples, l.deletes = inserts, samples, deletes
}

// LowerDiffTo raises the samples counter so that the diff is at most
// max_diff, if it is over it and max_diff is finite, and returns how much
// it raised it. A restore calls it once the checkpoint's items over the
// configured max_size are evicted: those deletes leave the diff as it
// was, and a diff over max_diff refuses every insert into a table that is
// not empty, so a queue restored smaller would otherwise take one item at
// a time for good.
func (l *Limiter) LowerDiffTo() int64 {
	d := l.Diff()
	if d <= l.cfg.MaxDiff || l.cfg.MaxDiff >= math.MaxFloat64 {
		return 0
	}
	raise := int64(math.Ceil(d - l.cfg.MaxDiff))
	if raise <= 0 || l.samples > math.MaxInt64-raise {
		return 0
	}
	l.samples += raise
	return raise
}

// Size is the number of items the limiter believes the table holds.
func (l *Limiter) Size() int64 { return l.inserts - l.deletes }

// Diff is inserts*SamplesPerInsert - samples. The product is rounded
// before the subtraction, as in Reverb: the conversion keeps the compiler
// from fusing the two into one multiply-subtract (Go may, and does on
// arm64), which rounds once and moves decisions at the boundaries, such
// as the first sample of SampleToInsertRatio(0.1, 10, 1).
func (l *Limiter) Diff() float64 {
	return float64(float64(l.inserts)*l.cfg.SamplesPerInsert) - float64(l.samples)
}

// CanInsert reports whether one more new item may be inserted now.
func (l *Limiter) CanInsert() bool {
	if l.inserts+1-l.deletes <= l.cfg.MinSizeToSample {
		return true
	}
	return float64(float64(l.inserts+1)*l.cfg.SamplesPerInsert)-float64(l.samples) <= l.cfg.MaxDiff // rounded: see Diff
}

// CanSample reports whether one more sample may be served now.
func (l *Limiter) CanSample() bool {
	if l.inserts-l.deletes < l.cfg.MinSizeToSample {
		return false
	}
	return float64(float64(l.inserts)*l.cfg.SamplesPerInsert)-float64(l.samples)-1 >= l.cfg.MinDiff // rounded: see Diff
}

// Insert counts one insert. The caller checks CanInsert first.
func (l *Limiter) Insert() { l.inserts++ }

// Sample counts one sample. The caller checks CanSample first.
func (l *Limiter) Sample() { l.samples++ }

// Delete counts one removed item (explicit delete, eviction or
// max_times_sampled). Deletes move the size, not the diff.
func (l *Limiter) Delete() { l.deletes++ }

// Reset zeroes the counters.
func (l *Limiter) Reset() { l.inserts, l.samples, l.deletes = 0, 0, 0 }
