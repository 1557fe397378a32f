package client

import (
	"errors"
	"fmt"
)

// Column is the history of one column of a TrajectoryWriter: the column's
// values at the last NumKeepAliveRefs steps (fewer at the start, or after
// EndEpisode with clearBuffers). Indices count steps of that window, 0 the
// oldest; negative indices count from the end, as in Python, so -1 is the
// latest step. Every column's history covers the same steps, so equal
// indices of different columns refer to the same step; a step that omitted
// the column is a gap, and referencing it is an error.
//
// Its methods return a TrajectoryColumn that records any error (bad index,
// gap, unknown column); CreateItem reports it. Column is a view: it always
// reads the writer's current history.
type Column struct {
	w    *TrajectoryWriter
	name string
}

// History returns the history of the named column. The column need not
// exist yet.
func (w *TrajectoryWriter) History(column string) *Column {
	return &Column{w: w, name: column}
}

// Name returns the column's name.
func (c *Column) Name() string { return c.name }

// Len returns the number of steps in the history window (the same for all
// columns), gaps included.
func (c *Column) Len() int {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	return c.w.histLen
}

// At references the step at index i (negative counts from the end) as a
// column of one row. Use Squeeze to drop the leading axis, as Python's
// history[i] does.
func (c *Column) At(i int) TrajectoryColumn {
	return c.cells(atBounds(c.name, i))
}

// Slice references the steps [from, to) (negative bounds count from the
// end). Unlike Python slices, bounds outside the history and empty ranges
// are errors.
func (c *Column) Slice(from, to int) TrajectoryColumn {
	return c.cells(sliceBounds(c.name, from, to))
}

// Last references the latest n steps, oldest first: Python's history[-n:].
func (c *Column) Last(n int) TrajectoryColumn {
	return c.cells(lastBounds(c.name, n))
}

// historyBounds maps the number of steps in a history window to the range
// [from, to) of window indices a reference takes, or an error. atBounds,
// sliceBounds and lastBounds make them for Column and PoolColumn alike.
type historyBounds func(n int) (from, to int, err error)

// atBounds is step i (negative counts from the end).
func atBounds(column string, i int) historyBounds {
	return func(n int) (int, int, error) {
		j := i
		if j < 0 {
			j += n
		}
		if j < 0 || j >= n {
			return 0, 0, fmt.Errorf("index %d out of range: history of column %q holds %d steps", i, column, n)
		}
		return j, j + 1, nil
	}
}

// sliceBounds is steps [from, to) (negative bounds count from the end);
// bounds outside the window and empty ranges are errors.
func sliceBounds(column string, from, to int) historyBounds {
	return func(n int) (int, int, error) {
		f, t := from, to
		if f < 0 {
			f += n
		}
		if t < 0 {
			t += n
		}
		if f < 0 || f >= t || t > n {
			return 0, 0, fmt.Errorf("slice [%d:%d] out of range or empty: history of column %q holds %d steps", from, to, column, n)
		}
		return f, t, nil
	}
}

// lastBounds is the latest k steps, oldest first.
func lastBounds(column string, k int) historyBounds {
	return func(n int) (int, int, error) {
		if k < 1 || k > n {
			return 0, 0, fmt.Errorf("last %d steps out of range: history of column %q holds %d steps", k, column, n)
		}
		return n - k, n, nil
	}
}

// cells resolves a range of the history under the writer's lock.
func (c *Column) cells(bounds historyBounds) TrajectoryColumn {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return TrajectoryColumn{err: ErrClosed}
	}
	from, to, err := bounds(w.histLen)
	if err != nil {
		return TrajectoryColumn{err: err}
	}
	col := w.columns[c.name]
	if col == nil {
		return TrajectoryColumn{err: fmt.Errorf("unknown column %q", c.name)}
	}
	out := make([]*writerCell, 0, to-from)
	for i, cell := range col.hist[from:to] {
		if cell == nil {
			return TrajectoryColumn{err: fmt.Errorf("column %q has no value at history index %d (the step omitted it)", c.name, from+i)}
		}
		out = append(out, cell)
	}
	return TrajectoryColumn{cells: out}
}

// TrajectoryColumn is one column of an item: references to steps of one
// writer column, in order, made by a Column's At, Slice or Last. Its rows
// are sent as chunk slices; the sampled column has shape [Len, step
// shape...], or the step shape if squeezed.
//
// A TrajectoryColumn is a value; the steps it references must still be in
// the history when CreateItem is called.
type TrajectoryColumn struct {
	cells   []*writerCell
	squeeze bool
	err     error
}

// Len returns the number of steps referenced.
func (t TrajectoryColumn) Len() int { return len(t.cells) }

// Squeezed reports whether the column drops its leading axis.
func (t TrajectoryColumn) Squeezed() bool { return t.squeeze }

// Squeeze returns the column marked to drop its leading axis, so that
// samples see the step's own shape. It needs exactly one step.
func (t TrajectoryColumn) Squeeze() TrajectoryColumn {
	if t.err == nil && len(t.cells) != 1 {
		t.err = fmt.Errorf("cannot squeeze a column of %d steps", len(t.cells))
	}
	t.squeeze = true
	return t
}

// Err returns the error recorded when the column was built, if any.
func (t TrajectoryColumn) Err() error {
	if t.err == nil {
		return nil
	}
	if errors.Is(t.err, ErrClosed) {
		return t.err
	}
	return fmt.Errorf("%w: %v", ErrInvalidArgument, t.err)
}
