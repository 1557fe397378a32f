package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/pbvalid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// ErrUnsupportedVersion is returned for a checkpoint file of a format
// version this package does not read.
var ErrUnsupportedVersion = errors.New("checkpoint: unsupported format version")

var chunkValidator = pbvalid.For((&reverbpb.ChunkData{}).ProtoReflect().Descriptor())

// Record is one record of a checkpoint file, as Load hands it over.
type Record struct {
	Kind Kind
	// Offset is the record's byte offset in the file.
	Offset int64
	Table  *reverbpb.PriorityTableCheckpoint // KindTable
	// ChunkBytes is a ChunkData's encoding as stored (KindChunk), owned
	// by the callback; Read checked that it decodes.
	ChunkBytes []byte
	Item       *reverbpb.PrioritizedItem // KindItem
	// Count is the number of items of the table a KindTableEnd closes.
	Count int64
}

// TableSummary describes one table of a verified file.
type TableSummary struct {
	Header *reverbpb.PriorityTableCheckpoint
	Items  int64
}

// Summary describes a verified checkpoint file.
type Summary struct {
	Path   string
	Size   int64
	Tables []TableSummary
	Items  int64
	Chunks int64
	// WALPosition is the last write-ahead log record the checkpoint holds
	// the effect of, or 0 if it was taken without a log.
	WALPosition uint64
}

// Verify reads the file at path through and checks it: magic and version,
// every record's checksum and payload, the order of the records, that
// every chunk an item references comes before it, and the counts of the
// table-end and file-end records. A damaged file fails with a
// *CorruptError (which wraps ErrCorrupt) naming the offset and the check.
func Verify(path string) (*Summary, error) { return scan(path, nil) }

// Read reads the file at path once, making the same checks as Verify, and
// calls fn with each record in order as it goes. Records and their messages
// are fn's to keep. A damage found late in the file comes after fn saw the
// records before it: use Load, or Verify first, to apply nothing from a
// damaged file. Read returns the first error of fn.
func Read(path string, fn func(*Record) error) (*Summary, error) { return scan(path, fn) }

// Load verifies the file at path and, only if it is sound, reads it again
// and calls fn with each record in order (see Read). The second pass checks
// everything again, so a file that changed in between still fails.
func Load(path string, fn func(*Record) error) (*Summary, error) {
	if _, err := Verify(path); err != nil {
		return nil, err
	}
	return Read(path, fn)
}

type scanner struct {
	path   string
	br     *bufio.Reader
	size   int64
	off    int64 // offset of the next unread byte
	record int64 // index of the record being read
	recOff int64 // offset of the record being read
	buf    []byte
}

func (s *scanner) corrupt(format string, args ...any) error {
	return &CorruptError{Path: s.path, Offset: s.recOff, Record: s.record, Reason: fmt.Sprintf(format, args...)}
}

// next reads one record. It returns io.EOF at the end of the file, before
// any byte of a record.
func (s *scanner) next() (Kind, []byte, error) {
	s.recOff = s.off
	var hdr [1 + binary.MaxVarintLen64]byte
	k, err := s.br.ReadByte()
	if err == io.EOF {
		return 0, nil, io.EOF
	}
	if err != nil {
		return 0, nil, fmt.Errorf("checkpoint: read %s: %w", s.path, err)
	}
	hdr[0] = k
	n := 1
	for {
		if n == len(hdr) {
			return 0, nil, s.corrupt("record length is not a valid varint")
		}
		b, err := s.br.ReadByte()
		if err == io.EOF {
			return 0, nil, s.corrupt("file ends inside a record header (truncated)")
		}
		if err != nil {
			return 0, nil, fmt.Errorf("checkpoint: read %s: %w", s.path, err)
		}
		hdr[n] = b
		n++
		if b < 0x80 {
			break
		}
	}
	length, vn := binary.Uvarint(hdr[1:n])
	if vn <= 0 {
		return 0, nil, s.corrupt("record length is not a valid varint")
	}
	s.off += int64(n)
	if left := s.size - s.off; length > uint64(max(left-4, 0)) {
		return 0, nil, s.corrupt("%s record of %d bytes runs past the end of the file (%d bytes left; truncated or damaged length)", Kind(k), length, left)
	}
	if uint64(cap(s.buf)) < length {
		s.buf = make([]byte, length)
	}
	payload := s.buf[:length]
	var tail [4]byte
	if _, err := io.ReadFull(s.br, payload); err != nil {
		if !isEOF(err) {
			return 0, nil, fmt.Errorf("checkpoint: read %s: %w", s.path, err) // an I/O error, not damage
		}
		return 0, nil, s.corrupt("reading %s record payload: %v (truncated)", Kind(k), err)
	}
	if _, err := io.ReadFull(s.br, tail[:]); err != nil {
		if !isEOF(err) {
			return 0, nil, fmt.Errorf("checkpoint: read %s: %w", s.path, err)
		}
		return 0, nil, s.corrupt("reading %s record checksum: %v (truncated)", Kind(k), err)
	}
	s.off += int64(length) + 4
	crc := crc32.Update(0, castagnoli, hdr[:n])
	crc = crc32.Update(crc, castagnoli, payload)
	if got := binary.LittleEndian.Uint32(tail[:]); got != crc {
		return 0, nil, s.corrupt("checksum mismatch in %s record of %d bytes: stored %08x, computed %08x", Kind(k), length, got, crc)
	}
	return Kind(k), payload, nil
}

// scan reads and checks the whole file; with fn != nil it decodes every
// record and hands it to fn.
func scan(path string, fn func(*Record) error) (*Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("checkpoint: %s is not a regular file", path)
	}
	s := &scanner{path: path, br: bufio.NewReaderSize(f, 1<<20), size: st.Size(), record: -1}
	var hdr [headerSize]byte
	if _, err := io.ReadFull(s.br, hdr[:]); err != nil {
		if !isEOF(err) {
			// EIO and the like are not damage: the operator must not
			// move a good checkpoint away over them.
			return nil, fmt.Errorf("checkpoint: read %s: %w", path, err)
		}
		return nil, s.corrupt("file is %d bytes, shorter than the %d-byte header", s.size, headerSize)
	}
	if !bytes.Equal(hdr[:len(magic)], magic[:]) {
		return nil, s.corrupt("bad magic %q: not a reverie checkpoint file", hdr[:len(magic)])
	}
	if v := binary.LittleEndian.Uint32(hdr[len(magic):]); v != Version {
		return nil, fmt.Errorf("%w: %s has format version %d; this reverie reads version %d", ErrUnsupportedVersion, path, v, Version)
	}
	s.off = int64(headerSize)

	sum := &Summary{Path: path, Size: s.size}
	chunks := make(map[uint64]struct{})
	tableNames := make(map[string]bool)
	var cur *TableSummary        // the open table
	var keys map[uint64]struct{} // the open table's item keys
	for s.record = 0; ; s.record++ {
		kind, payload, err := s.next()
		if err == io.EOF {
			return nil, s.corrupt("file ends without a file-end record (truncated)")
		}
		if err != nil {
			return nil, err
		}
		rec := &Record{Kind: kind, Offset: s.recOff}
		switch kind {
		case KindTable:
			if cur != nil {
				return nil, s.corrupt("table record inside table %q", cur.Header.GetTableName())
			}
			h := &reverbpb.PriorityTableCheckpoint{}
			if err := proto.Unmarshal(payload, h); err != nil {
				return nil, s.corrupt("table record is not a valid PriorityTableCheckpoint: %v", err)
			}
			name := h.GetTableName()
			switch {
			case name == "":
				return nil, s.corrupt("table record without a table name")
			case tableNames[name]:
				return nil, s.corrupt("table %q appears twice", name)
			case len(h.GetDeprecatedItems()) > 0:
				return nil, s.corrupt("table %q carries deprecated_items, which this format does not use", name)
			}
			tableNames[name] = true
			keys = make(map[uint64]struct{})
			sum.Tables = append(sum.Tables, TableSummary{Header: h})
			cur = &sum.Tables[len(sum.Tables)-1]
			rec.Table = h
		case KindChunk:
			if cur == nil {
				return nil, s.corrupt("chunk record outside a table")
			}
			key, err := chunkKey(payload)
			if err != nil {
				return nil, s.corrupt("chunk record is not a valid ChunkData: %v", err)
			}
			if _, dup := chunks[key]; dup {
				return nil, s.corrupt("chunk %d appears twice", key)
			}
			chunks[key] = struct{}{}
			sum.Chunks++
			// Checked in both passes: a file that Verify passes (an
			// imported snapshot, say) must not fail when loaded.
			if err := chunkValidator.Check(payload); err != nil {
				return nil, s.corrupt("chunk record is not a valid ChunkData: %v", err)
			}
			if fn != nil {
				rec.ChunkBytes = bytes.Clone(payload) // kept as stored: not decoded
			}
		case KindItem:
			if cur == nil {
				return nil, s.corrupt("item record outside a table")
			}
			it := &reverbpb.PrioritizedItem{}
			if err := proto.Unmarshal(payload, it); err != nil {
				return nil, s.corrupt("item record is not a valid PrioritizedItem: %v", err)
			}
			if it.GetTable() != cur.Header.GetTableName() {
				return nil, s.corrupt("item %d names table %q inside table %q", it.GetKey(), it.GetTable(), cur.Header.GetTableName())
			}
			// Caught here, not only when the table takes the items: a
			// file that Verify passes must load.
			if _, dup := keys[it.GetKey()]; dup {
				return nil, s.corrupt("item %d appears twice in table %q", it.GetKey(), it.GetTable())
			}
			keys[it.GetKey()] = struct{}{}
			if len(it.GetFlatTrajectory().GetColumns()) == 0 {
				return nil, s.corrupt("item %d of table %q has no trajectory columns", it.GetKey(), it.GetTable())
			}
			for _, col := range it.GetFlatTrajectory().GetColumns() {
				for _, sl := range col.GetChunkSlices() {
					if _, ok := chunks[sl.GetChunkKey()]; !ok {
						return nil, s.corrupt("item %d of table %q references chunk %d, which no earlier record holds", it.GetKey(), it.GetTable(), sl.GetChunkKey())
					}
				}
			}
			cur.Items++
			sum.Items++
			rec.Item = it
		case KindTableEnd:
			if cur == nil {
				return nil, s.corrupt("table-end record outside a table")
			}
			vals, err := uvarints(payload, 1)
			if err != nil {
				return nil, s.corrupt("table-end record: %v", err)
			}
			if vals[0] != uint64(cur.Items) {
				return nil, s.corrupt("table %q: table-end record counts %d items, the file holds %d", cur.Header.GetTableName(), vals[0], cur.Items)
			}
			rec.Count = cur.Items
			cur, keys = nil, nil
		case KindFileEnd:
			if cur != nil {
				return nil, s.corrupt("file-end record inside table %q", cur.Header.GetTableName())
			}
			vals, err := uvarints(payload, 3)
			if err != nil {
				// A fourth uvarint is the write-ahead log position.
				if vals, err = uvarints(payload, 4); err == nil {
					sum.WALPosition = vals[3]
				}
			}
			if err != nil {
				return nil, s.corrupt("file-end record: %v", err)
			}
			if vals[0] != uint64(len(sum.Tables)) || vals[1] != uint64(sum.Items) || vals[2] != uint64(sum.Chunks) {
				return nil, s.corrupt("file-end record counts %d tables, %d items, %d chunks; the file holds %d, %d, %d",
					vals[0], vals[1], vals[2], len(sum.Tables), sum.Items, sum.Chunks)
			}
			if s.off != s.size {
				return nil, s.corrupt("%d bytes follow the file-end record", s.size-s.off)
			}
		default:
			return nil, s.corrupt("unknown record kind %d", byte(kind))
		}
		if fn != nil && kind != KindFileEnd {
			if err := fn(rec); err != nil {
				return nil, err
			}
		}
		if kind == KindFileEnd {
			return sum, nil
		}
	}
}

// uvarints decodes exactly n uvarints that fill b.
func uvarints(b []byte, n int) ([]uint64, error) {
	out := make([]uint64, 0, n)
	for range n {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, errors.New("bad varint")
		}
		out = append(out, v)
		b = b[k:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(b))
	}
	return out, nil
}

// chunkKey reads field 1 (chunk_key) of an encoded ChunkData without
// decoding the rest, checking the wire structure of the whole message.
func chunkKey(b []byte) (uint64, error) {
	var key uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, protowire.ParseError(m)
			}
			key, b = v, b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return 0, protowire.ParseError(m)
		}
		b = b[m:]
	}
	return key, nil
}

// isEOF reports whether err is the end of the file, where a checkpoint
// cut short ends: damage, not an I/O error.
func isEOF(err error) bool { return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) }
