package checkpoint

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/writeback"
	"google.golang.org/protobuf/proto"
)

// Writer writes one checkpoint. Calls must follow the file's grammar:
// BeginTable, then Chunk and Item calls, then EndTable, for each table; then
// Commit, or Abort to give up. After the first error every call fails with
// it. Not safe for concurrent use.
type Writer struct {
	dir     string // the checkpoint directory
	tmpPath string
	f       *os.File
	bw      *bufio.Writer
	buf     []byte
	err     error

	chunks map[uint64]struct{} // keys of the chunks written
	walPos uint64              // see SetWALPosition
	table  string              // the open table, or ""
	inTbl  bool
	nItems int64 // items of the open table
	tables int64
	items  int64
}

const writeBufferSize = 1 << 20

// Create starts a checkpoint in a new directory under root, named after now
// in UTC (see DirName). The name is made later than every checkpoint name
// already in root, so that the newest checkpoint is always the greatest
// name even if the clock went back.
func Create(root string, now time.Time) (*Writer, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	names, err := listNames(root)
	if err != nil {
		return nil, err
	}
	t := now.UTC()
	if n := len(names); n > 0 {
		if last, _ := ParseDirName(names[n-1]); !t.After(last) {
			t = last.Add(time.Nanosecond)
		}
	}
	var dir string
	for {
		dir = filepath.Join(root, DirName(t))
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		t = t.Add(time.Nanosecond)
	}
	w := &Writer{dir: dir, tmpPath: filepath.Join(dir, FileName+tmpSuffix), chunks: make(map[uint64]struct{})}
	if w.f, err = os.OpenFile(w.tmpPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	w.bw = bufio.NewWriterSize(writeback.New(w.f), writeBufferSize)
	var hdr [headerSize]byte
	copy(hdr[:], magic[:])
	binary.LittleEndian.PutUint32(hdr[len(magic):], Version)
	if _, err := w.bw.Write(hdr[:]); err != nil {
		w.Abort()
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return w, nil
}

// Dir is the checkpoint's directory.
func (w *Writer) Dir() string { return w.dir }

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return w.err
}

// record writes [kind][uvarint len][payload][crc32c LE], the CRC covering
// kind, length and payload.
func (w *Writer) record(kind Kind, payload []byte) error {
	if w.err != nil {
		return w.err
	}
	var hdr [1 + binary.MaxVarintLen64]byte
	hdr[0] = byte(kind)
	n := 1 + binary.PutUvarint(hdr[1:], uint64(len(payload)))
	crc := crc32.Update(0, castagnoli, hdr[:n])
	crc = crc32.Update(crc, castagnoli, payload)
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], crc)
	for _, b := range [][]byte{hdr[:n], payload, tail[:]} {
		if _, err := w.bw.Write(b); err != nil {
			return w.fail(fmt.Errorf("checkpoint: write %s: %w", w.tmpPath, err))
		}
	}
	return nil
}

func (w *Writer) message(kind Kind, m proto.Message) error {
	if w.err != nil {
		return w.err
	}
	b, err := proto.MarshalOptions{}.MarshalAppend(w.buf[:0], m)
	if err != nil {
		return w.fail(fmt.Errorf("checkpoint: encode %s record: %w", kind, err))
	}
	if cap(b) <= 16<<20 { // keep small buffers for the next record
		w.buf = b
	}
	return w.record(kind, b)
}

// BeginTable opens a table. h.table_name must be set.
func (w *Writer) BeginTable(h *reverbpb.PriorityTableCheckpoint) error {
	switch {
	case w.err != nil:
		return w.err
	case w.inTbl:
		return w.fail(fmt.Errorf("checkpoint: BeginTable %q inside table %q", h.GetTableName(), w.table))
	case h.GetTableName() == "":
		return w.fail(errors.New("checkpoint: BeginTable without a table name"))
	}
	w.table, w.inTbl, w.nItems = h.GetTableName(), true, 0
	return w.message(KindTable, h)
}

// HasChunk reports whether the chunk with key was written already.
func (w *Writer) HasChunk(key uint64) bool {
	_, ok := w.chunks[key]
	return ok
}

// Chunk writes c unless a chunk with its key was written already.
func (w *Writer) Chunk(c *reverbpb.ChunkData) error {
	if !w.inTbl {
		return w.fail(fmt.Errorf("checkpoint: chunk %d outside a table", c.GetChunkKey()))
	}
	if w.HasChunk(c.GetChunkKey()) {
		return w.err
	}
	if err := w.message(KindChunk, c); err != nil {
		return err
	}
	w.chunks[c.GetChunkKey()] = struct{}{}
	return nil
}

// ChunkEncoded writes the chunk whose ChunkData encoding is enc, as it is,
// unless a chunk with key was written already. key must be enc's
// chunk_key.
func (w *Writer) ChunkEncoded(key uint64, enc []byte) error {
	if !w.inTbl {
		return w.fail(fmt.Errorf("checkpoint: chunk %d outside a table", key))
	}
	if w.HasChunk(key) {
		return w.err
	}
	if err := w.record(KindChunk, enc); err != nil {
		return err
	}
	w.chunks[key] = struct{}{}
	return nil
}

// Item writes an item of the open table. Its table field must name the
// open table, and every chunk it references must have been written.
func (w *Writer) Item(it *reverbpb.PrioritizedItem) error {
	switch {
	case w.err != nil:
		return w.err
	case !w.inTbl:
		return w.fail(fmt.Errorf("checkpoint: item %d outside a table", it.GetKey()))
	case it.GetTable() != w.table:
		return w.fail(fmt.Errorf("checkpoint: item %d names table %q inside table %q", it.GetKey(), it.GetTable(), w.table))
	}
	for _, col := range it.GetFlatTrajectory().GetColumns() {
		for _, sl := range col.GetChunkSlices() {
			if !w.HasChunk(sl.GetChunkKey()) {
				return w.fail(fmt.Errorf("checkpoint: item %d references chunk %d before it was written", it.GetKey(), sl.GetChunkKey()))
			}
		}
	}
	if err := w.message(KindItem, it); err != nil {
		return err
	}
	w.nItems++
	return nil
}

// ItemEncoded writes an item of the open table already encoded as a
// PrioritizedItem, whose table field must name the open table (not
// checked). key names it in errors; chunks are the keys of the chunks it
// references, each of which must have been written.
func (w *Writer) ItemEncoded(key uint64, chunks []uint64, enc []byte) error {
	switch {
	case w.err != nil:
		return w.err
	case !w.inTbl:
		return w.fail(fmt.Errorf("checkpoint: item %d outside a table", key))
	}
	for _, k := range chunks {
		if !w.HasChunk(k) {
			return w.fail(fmt.Errorf("checkpoint: item %d references chunk %d before it was written", key, k))
		}
	}
	if err := w.record(KindItem, enc); err != nil {
		return err
	}
	w.nItems++
	return nil
}

// EndTable closes the open table.
func (w *Writer) EndTable() error {
	if w.err != nil {
		return w.err
	}
	if !w.inTbl {
		return w.fail(errors.New("checkpoint: EndTable outside a table"))
	}
	if err := w.record(KindTableEnd, binary.AppendUvarint(nil, uint64(w.nItems))); err != nil {
		return err
	}
	w.inTbl = false
	w.tables++
	w.items += w.nItems
	return nil
}

// SetWALPosition records that the checkpoint holds the effect of every
// write-ahead log record up to and including lsn, and of none after it. A
// restore replays the log from lsn+1. Zero (the default) records nothing:
// the checkpoint was taken without a log.
func (w *Writer) SetWALPosition(lsn uint64) { w.walPos = lsn }

// Commit ends the file and makes the checkpoint durable and visible: it
// writes the file-end record, flushes and fsyncs the file, renames it to
// FileName, creates DONE and fsyncs the directories. It returns the
// checkpoint directory. On error the directory is removed.
func (w *Writer) Commit() (string, error) {
	if w.err == nil && w.inTbl {
		w.fail(fmt.Errorf("checkpoint: Commit inside table %q", w.table))
	}
	end := binary.AppendUvarint(nil, uint64(w.tables))
	end = binary.AppendUvarint(end, uint64(w.items))
	end = binary.AppendUvarint(end, uint64(len(w.chunks)))
	if w.walPos > 0 {
		end = binary.AppendUvarint(end, w.walPos)
	}
	w.record(KindFileEnd, end)
	if w.err == nil {
		if err := w.bw.Flush(); err != nil {
			w.fail(fmt.Errorf("checkpoint: write %s: %w", w.tmpPath, err))
		}
	}
	if w.err == nil {
		if err := w.f.Sync(); err != nil {
			w.fail(fmt.Errorf("checkpoint: fsync %s: %w", w.tmpPath, err))
		}
	}
	if err := w.f.Close(); err != nil {
		w.fail(fmt.Errorf("checkpoint: close %s: %w", w.tmpPath, err))
	}
	w.f = nil
	if w.err == nil {
		if err := os.Rename(w.tmpPath, filepath.Join(w.dir, FileName)); err != nil {
			w.fail(fmt.Errorf("checkpoint: %w", err))
		}
	}
	if w.err == nil {
		// DONE must not become visible before the rename is durable.
		if err := syncDir(w.dir); err != nil {
			w.fail(err)
		}
	}
	if w.err == nil {
		if err := writeDone(w.dir); err != nil {
			w.fail(err)
		}
	}
	if w.err == nil {
		if err := syncDir(filepath.Dir(w.dir)); err != nil {
			w.fail(err)
		}
	}
	if w.err != nil {
		os.RemoveAll(w.dir)
		return "", w.err
	}
	w.err = errors.New("checkpoint: writer already committed")
	return w.dir, nil
}

// Abort gives up the checkpoint and removes its directory.
func (w *Writer) Abort() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	w.fail(errors.New("checkpoint: writer aborted"))
	os.RemoveAll(w.dir)
}

func writeDone(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, DoneName), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("checkpoint: fsync %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("checkpoint: fsync %s: %w", dir, err)
	}
	return nil
}
