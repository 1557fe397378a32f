package client

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
)

// DefaultMaxInFlightItems is the bound on unconfirmed items used when
// WriterOptions.MaxInFlightItems is zero.
const DefaultMaxInFlightItems = 128

// writerAutoTuneItems is how many recent items of a column the automatic
// chunk length averages over.
const writerAutoTuneItems = 10

// WriterOptions configures a TrajectoryWriter.
type WriterOptions struct {
	// NumKeepAliveRefs is the length of the history of every column: how
	// many of the most recent steps CreateItem can reference. Required,
	// >= 1. Longer histories keep more chunks alive in the writer and on
	// the server.
	NumKeepAliveRefs int
	// ChunkLength fixes the number of rows (steps) per chunk, in
	// [1, NumKeepAliveRefs]. Zero tunes it per column: a column's chunk
	// length starts at 1 and then follows the average number of that
	// column's steps referenced by its last 10 items, within
	// [1, NumKeepAliveRefs]. Chunks about as long as items keep the
	// number of chunks an item touches at two or fewer while an item waits
	// at most about one item length for its last chunk to fill; longer
	// chunks compress better but delay sending.
	ChunkLength int
	// MaxInFlightItems bounds the items created but not yet confirmed by
	// the server (waiting for their chunks, being sent, or waiting for the
	// server's rate limiter). When it is reached, CreateItem finalises the
	// chunks of waiting items and blocks until a confirmation arrives or
	// its ctx ends, so that a slow server slows the writer down instead of
	// growing its memory. Zero means DefaultMaxInFlightItems.
	MaxInFlightItems int
	// DeltaEncode stores integer columns of rank >= 1 as differences
	// between consecutive steps before compression (see EncodeChunk).
	DeltaEncode bool
	// Logger receives the writer's logs; reconnects are warnings. Nil
	// means slog.Default().
	Logger *slog.Logger
}

// TrajectoryWriter writes trajectories to a server, as Reverb's
// TrajectoryWriter does: steps are appended column by column (Append),
// items are built from references to recent steps (History, CreateItem),
// and a background goroutine streams chunks and items to the server over
// one InsertStream, reconnecting and re-sending unconfirmed items when the
// server becomes unavailable.
//
// Every column is chunked on its own: its steps are batched into chunks of
// one tensor each ([rows, step shape...]). A chunk is sent, once per
// stream, with the first batch of items that references it; an item is sent
// once all chunks it references are complete, so items referencing the
// newest steps wait until their chunk fills up or Flush (or backpressure in
// CreateItem) finalises it early.
//
// Unlike Reverb's writer (validate_items), items are not checked against
// table signatures and no ServerInfo call is made: the server reports an
// unknown table or a bad priority. Such errors are sticky: once the stream
// fails with anything but UNAVAILABLE or CANCELLED, every later call
// returns that error.
//
// A TrajectoryWriter is safe for concurrent use, although the steps of an
// episode normally come from one goroutine. Close it to stop its
// goroutines.
type TrajectoryWriter struct {
	client      *Client
	log         *slog.Logger
	keepAlive   int  // NumKeepAliveRefs
	chunkLength int  // fixed chunk length, 0 for auto
	maxInFlight int  // MaxInFlightItems, defaulted
	delta       bool // DeltaEncode

	ctx    context.Context // ends when Close is called; parent of streams
	cancel context.CancelFunc
	wg     sync.WaitGroup // the stream worker

	mu sync.Mutex // guards the fields below
	// changed is closed and replaced whenever the state below changes in a
	// way someone may wait for (see notifyLocked).
	changed     chan struct{}
	waited      bool // someone took changed since it was made
	closed      bool
	err         error // sticky stream error
	episodeID   uint64
	episodeStep int32
	histLen     int // steps in every column's history, <= keepAlive
	columns     map[string]*writerColumn
	colList     []*writerColumn // columns' values, in creation order: cheaper to range over
	nextSeq     uint64
	queue       []*writerItem          // not yet sent on the current stream, by seq
	inflight    map[uint64]*writerItem // sent on the current stream, unconfirmed, by key
	marks       uint64                 // the last stream id or request mark handed out (see nextRequest)
}

// writerColumn is one column's chunker and history.
type writerColumn struct {
	w     *TrajectoryWriter
	name  string
	dtype DType
	shape []int64 // step shape
	// hist holds the column's cells of the last histLen steps, oldest
	// first; nil where a step omitted the column. It is a window of
	// histBuf once pushHist has moved it there.
	hist    []*writerCell
	histBuf []*writerCell
	open    *writerChunk // chunk receiving rows, nil if none
	// itemLens are the row counts of the column in its recent items, for
	// the automatic chunk length.
	itemLens []int
}

// writerChunk is a chunk of one column: open while it receives rows, then
// finalised into its wire form.
type writerChunk struct {
	key        uint64
	col        *writerColumn
	episode    uint64
	start, end int32 // episode steps of the first and the last row
	rows       int
	// While open, the rows copied so far, stacked: data for fixed-size
	// dtypes, strs (elements) for DT_STRING. A chunk finalised in the same
	// Append as its first row is encoded from the caller's tensor instead.
	data []byte
	strs [][]byte
	// enc is the encoded ChunkData once finalised, nil before. It is never
	// modified afterwards: requests reference it while gRPC sends them.
	enc []byte
	// encBuf, when not nil, is the writer's reference to the pooled
	// buffer of a big enc, freed (and enc dropped) when users falls to
	// zero; encSmall is the same for a small enc, when encSmall.buf is
	// not nil.
	encBuf   mem.Buffer
	encSmall smallBuf
	// users counts the live history cells of the chunk and the items in
	// the queue or in flight that reference it.
	users int
	// heldBy is the id of the insert stream whose server side holds the
	// chunk, 0 if none; keptBy marks the chunk while a request lists the
	// chunks to keep. See nextRequest.
	heldBy, keptBy uint64
	// cell0 is the cell of the first row, allocated with the chunk.
	cell0 writerCell
}

// writerCell references one step of one column: a row of a chunk.
type writerCell struct {
	chunk *writerChunk
	row   int
	live  bool // false once the step left the history; guarded by mu
}

// writerItem is an item created and not yet confirmed.
type writerItem struct {
	seq    uint64         // creation order
	key    uint64         // the item's key
	enc    []byte         // the encoded PrioritizedItem; never modified
	chunks []*writerChunk // distinct chunks referenced, in order
	chunk0 [1]*writerChunk
}

// ready reports whether every chunk the item references is finalised.
func (it *writerItem) ready() bool {
	for _, c := range it.chunks {
		if c.enc == nil {
			return false
		}
	}
	return true
}

// NewTrajectoryWriter returns a writer that inserts into the client's
// server. It does no I/O: the insert stream is opened in the background
// when the first item is ready to be sent, so ctx is only checked on
// entry. Close the writer when done.
func (c *Client) NewTrajectoryWriter(ctx context.Context, opts WriterOptions) (*TrajectoryWriter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.NumKeepAliveRefs < 1 {
		return nil, fmt.Errorf("%w: WriterOptions.NumKeepAliveRefs must be >= 1, got %d", ErrInvalidArgument, opts.NumKeepAliveRefs)
	}
	if opts.ChunkLength < 0 || opts.ChunkLength > opts.NumKeepAliveRefs {
		return nil, fmt.Errorf("%w: WriterOptions.ChunkLength must be in [0, NumKeepAliveRefs=%d], got %d",
			ErrInvalidArgument, opts.NumKeepAliveRefs, opts.ChunkLength)
	}
	if opts.MaxInFlightItems < 0 {
		return nil, fmt.Errorf("%w: WriterOptions.MaxInFlightItems must be >= 0, got %d", ErrInvalidArgument, opts.MaxInFlightItems)
	}
	w := &TrajectoryWriter{
		client:      c,
		log:         opts.Logger,
		keepAlive:   opts.NumKeepAliveRefs,
		chunkLength: opts.ChunkLength,
		maxInFlight: opts.MaxInFlightItems,
		delta:       opts.DeltaEncode,
		changed:     make(chan struct{}),
		episodeID:   NewKey(),
		columns:     make(map[string]*writerColumn),
		inflight:    make(map[uint64]*writerItem),
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.maxInFlight == 0 {
		w.maxInFlight = DefaultMaxInFlightItems
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.wg.Add(1)
	go w.run()
	return w, nil
}

// Append adds one step. Every entry of step is the value of the named
// column at this step; columns absent from step get no entry in their
// history for this step (a gap that items cannot reference), as Reverb's
// partial steps. A column's dtype and shape are fixed by its first value
// for the writer's lifetime; a mismatch fails the whole step, which is then
// not appended. The tensors are copied.
//
// Append does not wait for the network (ctx is only checked on entry). It
// returns ErrClosed after Close and the sticky error after a stream failure.
func (w *TrajectoryWriter) Append(ctx context.Context, step map[string]Tensor) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(step) == 0 {
		return fmt.Errorf("%w: Append: empty step", ErrInvalidArgument)
	}
	// The step's columns, sorted by name; each entry's column is looked
	// up once, below.
	var buf [8]stepColumn
	cols := buf[:0]
	for name, t := range step {
		cols = append(cols, stepColumn{name: name, t: t})
	}
	if len(cols) > 1 {
		slices.SortFunc(cols, func(a, b stepColumn) int { return strings.Compare(a.name, b.name) })
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		return err
	}
	if w.episodeStep == math.MaxInt32 {
		return fmt.Errorf("%w: Append: episode has %d steps, the most a sequence range can number", ErrInvalidArgument, w.episodeStep)
	}
	for i := range cols {
		name, t := cols[i].name, &cols[i].t
		if name == "" {
			return fmt.Errorf("%w: Append: empty column name", ErrInvalidArgument)
		}
		if err := t.Validate(); err != nil {
			return fmt.Errorf("%w: Append: column %q: %v", ErrInvalidArgument, name, err)
		}
		col := w.columns[name]
		if col != nil && (t.DType != col.dtype || !slices.Equal(t.Shape, col.shape)) {
			return fmt.Errorf("%w: Append: column %q holds %v%v steps, got %v%v",
				ErrInvalidArgument, name, col.dtype, col.shape, t.DType, t.Shape)
		}
		cols[i].col = col
	}

	// Move the history window by one step: every column gets a gap, which
	// the columns present in step fill below.
	if w.histLen == w.keepAlive {
		for _, col := range w.colList {
			if c := col.hist[0]; c != nil {
				c.live = false
				c.chunk.dropUser()
			}
			col.hist[0] = nil
			col.hist = col.hist[1:]
		}
	} else {
		w.histLen++
	}
	for _, col := range w.colList {
		col.pushHist()
	}

	for i := range cols {
		name, t, col := cols[i].name, cols[i].t, cols[i].col
		if col == nil {
			col = &writerColumn{w: w, name: name, dtype: t.DType, shape: cloneShape(t.Shape), hist: make([]*writerCell, w.histLen)}
			w.columns[name] = col
			w.colList = append(w.colList, col)
		}
		if err := w.appendRowLocked(col, t); err != nil {
			return err
		}
	}
	w.episodeStep++
	return nil
}

// stepColumn is one column of a step given to Append.
type stepColumn struct {
	name string
	t    Tensor
	col  *writerColumn // the writer's column, nil if new
}

// pushHist adds an empty entry at the end of the column's history. The
// window slides along histBuf, twice its length, and is moved back to the
// start when it reaches the end, so that steps do not allocate.
func (col *writerColumn) pushHist() {
	if n := len(col.hist); n == cap(col.hist) {
		if cap(col.histBuf) < 2*n+1 {
			col.histBuf = make([]*writerCell, 2*n+1)
		}
		buf := col.histBuf[:cap(col.histBuf)]
		copy(buf, col.hist)
		clear(buf[n:])
		col.hist = buf[:n]
	}
	col.hist = append(col.hist, nil)
}

// chunkLengthLocked is the number of rows at which col's open chunk is
// finalised.
func (w *TrajectoryWriter) chunkLengthLocked(col *writerColumn) int {
	if w.chunkLength > 0 {
		return w.chunkLength
	}
	if len(col.itemLens) == 0 {
		return 1
	}
	sum := 0
	for _, n := range col.itemLens {
		sum += n
	}
	n := (sum + len(col.itemLens) - 1) / len(col.itemLens)
	return max(1, min(n, w.keepAlive))
}

// appendRowLocked adds t, a valid step of col, as the next row of col's
// open chunk and as the newest cell of col's history, and finalises the
// chunk when it is full. A chunk that is full with its first row is
// encoded straight from t; other rows are copied into the chunk.
func (w *TrajectoryWriter) appendRowLocked(col *writerColumn, t Tensor) error {
	ch := col.open
	if ch == nil {
		ch = &writerChunk{key: NewKey(), col: col, episode: w.episodeID, start: w.episodeStep}
		col.open = ch
	}
	var cell *writerCell
	if ch.rows == 0 {
		cell = &ch.cell0
	} else {
		cell = &writerCell{}
	}
	*cell = writerCell{chunk: ch, row: ch.rows, live: true}
	ch.users++
	col.hist[len(col.hist)-1] = cell
	ch.end = w.episodeStep
	ch.rows++
	limit := w.chunkLengthLocked(col)
	if ch.rows == 1 && limit <= 1 {
		return w.finaliseLocked(col, &t)
	}
	if col.dtype == DTString {
		for _, s := range t.Strings {
			ch.strs = append(ch.strs, bytes.Clone(s))
		}
	} else {
		if ch.data == nil {
			ch.data = make([]byte, 0, len(t.Data)*max(limit, 1))
		}
		ch.data = append(ch.data, t.Data...)
	}
	if ch.rows >= limit {
		return w.finaliseLocked(col, nil)
	}
	return nil
}

// finaliseLocked encodes col's open chunk: its only row is *single if that
// is not nil, else the rows it holds. A failure is sticky: the rows cannot
// be sent any more.
func (w *TrajectoryWriter) finaliseLocked(col *writerColumn, single *Tensor) error {
	ch := col.open
	col.open = nil
	shape := make([]int64, 0, 1+len(col.shape))
	shape = append(shape, int64(ch.rows))
	shape = append(shape, col.shape...)
	h := chunkHead{
		key:     ch.key,
		episode: ch.episode,
		start:   ch.start,
		end:     ch.end,
		sparse:  int(ch.end-ch.start)+1 != ch.rows,
		delta:   w.delta,
		dtype:   col.dtype,
		shape:   shape,
	}
	var enc []byte
	var err error
	if col.dtype == DTString {
		strs := ch.strs
		if single != nil {
			strs = single.Strings
		}
		h.uncompressed = int64(len(strs)) * StringElementOverhead
		for _, s := range strs {
			h.uncompressed += int64(len(s))
		}
		enc, err = encodeChunkStrings(&h, strs)
	} else {
		raw := ch.data
		if single != nil {
			// One row: delta encoding leaves the first row as it is.
			raw = single.Data
		} else if w.delta && deltaApplies(col.dtype, len(shape)) {
			size, _ := DTypeSize(col.dtype)
			deltaEncodeInPlace(raw, size, len(raw)/ch.rows)
		}
		h.uncompressed = int64(len(raw))
		var small *[]byte
		enc, ch.encBuf, small, err = encodeChunkRaw(&h, raw, wirePool)
		if small != nil {
			ch.encSmall.init(small, wirePool)
		}
	}
	ch.data, ch.strs = nil, nil
	if err != nil {
		w.err = fmt.Errorf("%w: trajectory writer: encoding column %q: %v", ErrInvalidArgument, col.name, err)
		w.notifyLocked()
		return w.err
	}
	ch.enc = enc
	w.notifyLocked()
	return nil
}

// finaliseQueuedLocked finalises the open chunks that queued items
// reference, so that the worker can send every queued item.
func (w *TrajectoryWriter) finaliseQueuedLocked() error {
	for _, it := range w.queue {
		for _, ch := range it.chunks {
			if ch.enc == nil && ch.col.open == ch {
				if err := w.finaliseLocked(ch.col, nil); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// CreateItem creates an item in table with the given priority, made of the
// trajectory's columns in order (column i of the item is trajectory[i]),
// and queues it for sending. Columns are usually built from History; to
// match a Python dataset whose table signature is a dict, order the
// columns by sorted name, as tree.flatten does.
//
// CreateItem returns once the item is queued, not when the server has it;
// use Flush to wait for confirmations. When MaxInFlightItems items are
// unconfirmed it first blocks until one is confirmed, returning ctx.Err()
// if ctx ends first. Invalid trajectories (empty, gaps, steps no longer in
// the history) wrap ErrInvalidArgument. It returns ErrClosed after Close
// and the sticky error after a stream failure.
func (w *TrajectoryWriter) CreateItem(ctx context.Context, table string, priority float64, trajectory []TrajectoryColumn) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(trajectory) == 0 {
		return fmt.Errorf("%w: CreateItem: empty trajectory", ErrInvalidArgument)
	}
	if !utf8.ValidString(table) {
		return fmt.Errorf("%w: CreateItem: table name %q is not valid UTF-8", ErrInvalidArgument, table)
	}
	for i, tc := range trajectory {
		// Fail before waiting for room; newItemLocked checks the rest.
		if err := tc.Err(); err != nil {
			return fmt.Errorf("CreateItem: trajectory column %d: %w", i, err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if err := w.usableLocked(); err != nil {
			return err
		}
		if len(w.queue)+len(w.inflight) < w.maxInFlight {
			break
		}
		// Let queued items leave, then wait for confirmations.
		if err := w.finaliseQueuedLocked(); err != nil {
			return err
		}
		if err := w.waitLocked(ctx); err != nil {
			return err
		}
	}
	it, err := w.newItemLocked(table, priority, trajectory)
	if err != nil {
		return err
	}
	w.queue = append(w.queue, it)
	w.notifyLocked()
	return nil
}

// newItemLocked checks the trajectory and builds the item, merging
// consecutive rows of a chunk into one slice.
func (w *TrajectoryWriter) newItemLocked(table string, priority float64, trajectory []TrajectoryColumn) (*writerItem, error) {
	it := &writerItem{}
	it.chunks = it.chunk0[:0]
	var sliceBuf [4]itemSlice
	var endBuf [4]int
	var squeezeBuf [4]bool
	slices := sliceBuf[:0]
	colEnd := endBuf[:0]
	squeeze := squeezeBuf[:0]
	for i, tc := range trajectory {
		if err := tc.Err(); err != nil {
			return nil, fmt.Errorf("CreateItem: trajectory column %d: %w", i, err)
		}
		if len(tc.cells) == 0 {
			return nil, fmt.Errorf("%w: CreateItem: trajectory column %d is empty", ErrInvalidArgument, i)
		}
		col := tc.cells[0].chunk.col
		if col.w != w {
			return nil, fmt.Errorf("%w: CreateItem: trajectory column %d comes from another writer", ErrInvalidArgument, i)
		}
		var lastCell *writerCell
		for _, c := range tc.cells {
			if c.chunk.col != col {
				return nil, fmt.Errorf("%w: CreateItem: trajectory column %d mixes columns %q and %q",
					ErrInvalidArgument, i, col.name, c.chunk.col.name)
			}
			if !c.live {
				return nil, fmt.Errorf("%w: CreateItem: trajectory column %d references a step of column %q that is no longer in the history",
					ErrInvalidArgument, i, col.name)
			}
			if lastCell != nil && c.chunk == lastCell.chunk && c.row == lastCell.row+1 {
				slices[len(slices)-1].length++
			} else {
				slices = append(slices, itemSlice{key: c.chunk.key, offset: int32(c.row), length: 1})
			}
			lastCell = c
			if !containsChunk(it.chunks, c.chunk) {
				it.chunks = append(it.chunks, c.chunk)
			}
		}
		colEnd = append(colEnd, len(slices))
		squeeze = append(squeeze, tc.squeeze)
	}
	if w.chunkLength == 0 {
		for _, tc := range trajectory {
			col := tc.cells[0].chunk.col
			col.itemLens = append(col.itemLens, len(tc.cells))
			if len(col.itemLens) > writerAutoTuneItems {
				col.itemLens = col.itemLens[1:]
			}
		}
	}
	for _, ch := range it.chunks {
		ch.users++
	}
	w.nextSeq++
	it.seq = w.nextSeq
	it.key = NewKey()
	it.enc = encodeItem(it.key, table, priority, slices, colEnd, squeeze)
	return it, nil
}

// dropUser records that a history cell or an item no longer references
// the chunk. With no user left the chunk can never be sent again, and its
// pooled buffer goes back to the pool once gRPC has sent it (a big
// encoding) or the requests that include it have copied it (a small one).
func (ch *writerChunk) dropUser() {
	ch.users--
	if ch.users != 0 {
		return
	}
	if ch.encBuf != nil {
		ch.encBuf.Free()
		ch.encBuf, ch.enc = nil, nil
	}
	if ch.encSmall.buf != nil {
		ch.enc = nil
		ch.encSmall.release()
	}
}

func containsChunk(chunks []*writerChunk, ch *writerChunk) bool {
	for _, c := range chunks {
		if c == ch {
			return true
		}
	}
	return false
}

// Flush finalises the partial chunks that created items reference, lets the
// background goroutine send them, and waits until the server has confirmed
// every item created so far. It returns ctx.Err() if ctx ends first (the
// items stay queued), ErrClosed after Close, and the sticky error if the
// stream failed for good.
func (w *TrajectoryWriter) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked(ctx)
}

func (w *TrajectoryWriter) flushLocked(ctx context.Context) error {
	for {
		if err := w.usableLocked(); err != nil {
			return err
		}
		if len(w.queue)+len(w.inflight) == 0 {
			return nil
		}
		if err := w.finaliseQueuedLocked(); err != nil {
			return err
		}
		if err := w.waitLocked(ctx); err != nil {
			return err
		}
	}
}

// EndEpisode flushes (see Flush), then starts a new episode: a new random
// episode id, step 0, and new chunks for every column. With clearBuffers
// the history of every column is dropped, so later items can only
// reference steps appended after the call; without it, the last steps of
// the ended episode stay referenceable.
func (w *TrajectoryWriter) EndEpisode(ctx context.Context, clearBuffers bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.flushLocked(ctx); err != nil {
		return err
	}
	// flushLocked returned with the lock held and nothing queued, so open
	// chunks are referenced by the history only.
	for _, col := range w.colList {
		if col.open != nil {
			if clearBuffers {
				col.open = nil
			} else if err := w.finaliseLocked(col, nil); err != nil {
				return err
			}
		}
		if clearBuffers {
			for _, c := range col.hist {
				if c != nil {
					c.live = false
					c.chunk.dropUser()
				}
			}
			col.hist = nil
		}
	}
	if clearBuffers {
		w.histLen = 0
	}
	w.episodeID = NewKey()
	w.episodeStep = 0
	return nil
}

// EpisodeSteps returns the number of steps appended since the writer was
// created or the last EndEpisode.
func (w *TrajectoryWriter) EpisodeSteps() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.episodeStep)
}

// Close stops the background goroutine and cancels the insert stream.
// Items not yet confirmed are dropped (the server may or may not apply
// those it already received); call Flush first to keep them. Close is
// idempotent and always returns nil; every other method returns ErrClosed
// afterwards.
func (w *TrajectoryWriter) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.notifyLocked()
	w.mu.Unlock()

	w.cancel()
	w.wg.Wait()

	w.mu.Lock()
	w.queue = nil
	clear(w.inflight)
	clear(w.columns)
	clear(w.colList)
	w.colList = nil
	w.mu.Unlock()
	return nil
}

// usableLocked returns the error every call returns once the writer is
// closed or its stream failed for good.
func (w *TrajectoryWriter) usableLocked() error {
	if w.closed {
		return ErrClosed
	}
	return w.err
}

// notifyLocked wakes everyone waiting for a change (waitLocked,
// waitChanLocked). When nobody took the current channel since the last
// notification there is nobody to wake, and nothing is done.
func (w *TrajectoryWriter) notifyLocked() {
	if !w.waited {
		return
	}
	w.waited = false
	close(w.changed)
	w.changed = make(chan struct{})
}

// waitChanLocked returns a channel that the next notifyLocked closes.
func (w *TrajectoryWriter) waitChanLocked() <-chan struct{} {
	w.waited = true
	return w.changed
}

// waitLocked releases mu until the next notifyLocked or until ctx ends, and
// returns ctx.Err() in the latter case. mu is held again on return.
func (w *TrajectoryWriter) waitLocked(ctx context.Context) error {
	changed := w.waitChanLocked()
	w.mu.Unlock()
	defer w.mu.Lock()
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
