package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/pbvalid"
	"github.com/reverie-rl/reverie/internal/writeback"
)

// Version is the segment format version this package writes and reads.
const Version uint32 = 1

// magic opens every segment file; like a checkpoint's, its high first byte
// and CR LF ^Z catch transfers that mangle binary files.
var magic = [8]byte{0x89, 'R', 'V', 'W', 'L', '\r', '\n', 0x1a}

// segmentHeaderSize is the magic, the version and the first LSN.
const segmentHeaderSize = len(magic) + 4 + 8

// frameHeaderSize is a record's payload length and CRC-32C.
const frameHeaderSize = 8

// maxPayload bounds a record's payload, so that a damaged length is
// caught as one. It is above the largest gRPC message the server takes
// (2^31-1 bytes) and the few bytes a record adds, so that every chunk or
// item the server accepts can be logged: a record the log refused would
// stop the log for every client.
const maxPayload int64 = 1<<31 + 1<<20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const segmentSuffix = ".wal"

// segmentName names the segment whose first record is first: the LSN in
// 20 decimal digits, so that names sort as the LSNs do.
func segmentName(first uint64) string { return fmt.Sprintf("%020d%s", first, segmentSuffix) }

type segment struct {
	f     *os.File
	w     *writeback.File // writes f without keeping it in the page cache
	path  string
	first uint64
	size  int64
	dirty bool // written since the last fsync
}

func createSegment(dir string, first uint64) (*segment, error) {
	path := filepath.Join(dir, segmentName(first))
	// A segment of the same name can only be an empty leftover of a
	// crash right after it was created (Replay truncates torn tails, and a
	// segment with records after first is named by them): replace it.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	var hdr [segmentHeaderSize]byte
	copy(hdr[:], magic[:])
	binary.LittleEndian.PutUint32(hdr[len(magic):], Version)
	binary.LittleEndian.PutUint64(hdr[len(magic)+4:], first)
	s := &segment{f: f, w: writeback.New(f), path: path, first: first}
	if err := s.write(hdr[:]); err != nil {
		f.Close()
		return nil, err
	}
	// The header and the directory entry are made durable at once, so
	// that a segment is never found without its header.
	if err := s.sync(); err != nil {
		f.Close()
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func (s *segment) write(b []byte) error {
	n, err := s.w.Write(b)
	s.size += int64(n)
	s.dirty = true
	if err != nil {
		return fmt.Errorf("wal: %w", err) // a *PathError: it names the file
	}
	return nil
}

func (s *segment) sync() error {
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	s.dirty = false
	return nil
}

func (s *segment) close() error {
	if s.f == nil {
		return nil
	}
	var err error
	if s.dirty {
		err = s.sync()
	}
	if cerr := s.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("wal: close %s: %w", s.path, cerr)
	}
	s.f = nil
	return err
}

// sectorSize is the unit a disk writes whole, or not at all.
const sectorSize = 512

// tornWrite reports whether a damaged frame at data[off:end], in the last
// segment, is what a crash during a write leaves rather than damage to
// data that was on disk: nothing but zeros follows it, or it holds a whole
// sector of zeros (a sector that never reached the disk, where a later
// one did, as writeback may order them), or its header is zeros. Records
// from there on were written after the last fsync, so under fsync always
// none was acknowledged. etcd's log reads a torn write the same way.
func tornWrite(data []byte, off, end int) bool {
	if end == len(data) || allZero(data[end:]) {
		return true
	}
	if allZero(data[off : off+frameHeaderSize]) {
		return true
	}
	for s := (off + sectorSize - 1) / sectorSize * sectorSize; s+sectorSize <= end; s += sectorSize {
		if allZero(data[s : s+sectorSize]) {
			return true
		}
	}
	return false
}

// allZero reports whether every byte of b is zero.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// truncateDurable cuts the file at path to size and fsyncs it, so that a
// second crash cannot bring the cut bytes back in a segment that is no
// longer the last (where a torn record is corruption).
func truncateDurable(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// mkdirDurable creates dir and any missing parents, and fsyncs the parent
// of dir and of each directory it created, so that a crash cannot lose the
// directory entries (and with them every segment in dir).
func mkdirDurable(dir string) error {
	dir = filepath.Clean(dir)
	parents := []string{filepath.Dir(dir)}
	for d := dir; ; {
		p := filepath.Dir(d)
		if p == d {
			break
		}
		if _, err := os.Stat(p); err == nil {
			break
		}
		parents = append(parents, filepath.Dir(p))
		d = p
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	for _, p := range parents {
		if err := syncDir(p); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("wal: fsync %s: %w", dir, err)
	}
	return nil
}

// HasSegments reports whether dir holds any segment file.
func HasSegments(dir string) (bool, error) {
	segs, err := listSegments(dir)
	return len(segs) > 0, err
}

type segmentFile struct {
	path  string
	first uint64
}

// listSegments returns the segment files in dir, by first LSN. A missing
// dir has none.
func listSegments(dir string) ([]segmentFile, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	var out []segmentFile
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, segmentSuffix) || !e.Type().IsRegular() {
			continue
		}
		first, err := strconv.ParseUint(strings.TrimSuffix(name, segmentSuffix), 10, 64)
		if err != nil || segmentName(first) != name {
			continue
		}
		out = append(out, segmentFile{path: filepath.Join(dir, name), first: first})
	}
	slices.SortFunc(out, func(a, b segmentFile) int {
		switch {
		case a.first < b.first:
			return -1
		case a.first > b.first:
			return 1
		}
		return 0
	})
	return out, nil
}

// appendRecord appends e's frame, as record lsn, to b.
//
// Frame: uint32 payload length, uint32 CRC-32C (Castagnoli) of the payload,
// payload. Payload: uvarint LSN, op byte, then by op:
//
//	chunk   deepmind.reverb.ChunkData
//	insert  table, fixed64 key, fixed64 priority bits, varint inserted_at (Unix ns), deepmind.reverb.FlatTrajectory
//	update  table, fixed64 key, fixed64 priority bits
//	sample  table, fixed64 key, uvarint times_sampled
//	delete  table, fixed64 key
//	reset   table
//
// where table is a uvarint length and the name's bytes.
func appendRecord(b []byte, lsn uint64, e *entry) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, frameHeaderSize)...)
	b = binary.AppendUvarint(b, lsn)
	b = append(b, byte(e.op))
	var err error
	switch e.op {
	case OpChunk:
		var enc []byte
		if enc, err = e.chunk.Encoded(); err == nil {
			b = append(b, enc...) // as received: no re-encoding
		}
	case OpInsert:
		b = appendTable(b, e.table)
		b = binary.LittleEndian.AppendUint64(b, e.key)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.priority))
		b = binary.AppendVarint(b, e.insertedAt)
		b = append(b, e.traj...) // the table's encoding, as received
	case OpUpdate:
		b = appendTable(b, e.table)
		b = binary.LittleEndian.AppendUint64(b, e.key)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.priority))
	case OpSample:
		b = appendTable(b, e.table)
		b = binary.LittleEndian.AppendUint64(b, e.key)
		b = binary.AppendUvarint(b, uint64(e.timesSampled))
	case OpDelete:
		b = appendTable(b, e.table)
		b = binary.LittleEndian.AppendUint64(b, e.key)
	case OpReset:
		b = appendTable(b, e.table)
	default:
		err = fmt.Errorf("unknown op %d", e.op)
	}
	if err != nil {
		return b[:start], err
	}
	payload := b[start+frameHeaderSize:]
	if int64(len(payload)) > maxPayload {
		return b[:start], fmt.Errorf("record of %d bytes is over the %d-byte limit", len(payload), maxPayload)
	}
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b, nil
}

func appendTable(b []byte, name string) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	return append(b, name...)
}

// Record is one record read back from the log.
type Record struct {
	LSN uint64
	Op  Op
	// Table is empty for OpChunk.
	Table        string
	Key          uint64
	Priority     float64 // OpInsert, OpUpdate
	TimesSampled int32   // OpSample
	InsertedAt   int64   // OpInsert
	// TrajectoryBytes is the item's FlatTrajectory, encoded as the table
	// keeps it (OpInsert); Replay checked that it decodes.
	TrajectoryBytes []byte
	// ChunkBytes is a ChunkData's encoding as logged (OpChunk); Replay
	// checked that it decodes.
	ChunkBytes []byte
	// File and Offset locate the record, for messages.
	File   string
	Offset int64
}

var (
	chunkValidator      = pbvalid.For((&reverbpb.ChunkData{}).ProtoReflect().Descriptor())
	trajectoryValidator = pbvalid.For((&reverbpb.FlatTrajectory{}).ProtoReflect().Descriptor())
)

// decodePayload decodes a record's payload.
func decodePayload(p []byte) (Record, error) {
	var r Record
	lsn, n := binary.Uvarint(p)
	if n <= 0 {
		return r, errors.New("bad LSN varint")
	}
	r.LSN, p = lsn, p[n:]
	if len(p) == 0 {
		return r, errors.New("no op")
	}
	r.Op, p = Op(p[0]), p[1:]
	if r.Op == OpChunk {
		if err := chunkValidator.Check(p); err != nil {
			return r, fmt.Errorf("chunk: %w", err)
		}
		r.ChunkBytes = bytes.Clone(p) // kept as logged: not decoded
		return r, nil
	}
	if r.Op < OpChunk || r.Op > OpReset {
		return r, fmt.Errorf("unknown op %d", byte(r.Op))
	}
	tl, n := binary.Uvarint(p)
	if n <= 0 || tl > uint64(len(p)-n) {
		return r, errors.New("bad table name")
	}
	r.Table, p = string(p[n:n+int(tl)]), p[n+int(tl):]
	if r.Op == OpReset {
		if len(p) != 0 {
			return r, fmt.Errorf("%d trailing bytes", len(p))
		}
		return r, nil
	}
	if len(p) < 8 {
		return r, errors.New("short key")
	}
	r.Key, p = binary.LittleEndian.Uint64(p), p[8:]
	switch r.Op {
	case OpInsert, OpUpdate:
		if len(p) < 8 {
			return r, errors.New("short priority")
		}
		r.Priority, p = math.Float64frombits(binary.LittleEndian.Uint64(p)), p[8:]
	case OpSample:
		ts, n := binary.Uvarint(p)
		if n <= 0 || ts > math.MaxInt32 {
			return r, errors.New("bad times_sampled")
		}
		r.TimesSampled, p = int32(ts), p[n:]
	}
	if r.Op == OpInsert {
		at, n := binary.Varint(p)
		if n <= 0 {
			return r, errors.New("bad inserted_at")
		}
		r.InsertedAt, p = at, p[n:]
		if err := trajectoryValidator.Check(p); err != nil {
			return r, fmt.Errorf("flat_trajectory: %w", err)
		}
		r.TrajectoryBytes = bytes.Clone(p)
		return r, nil
	}
	if len(p) != 0 {
		return r, fmt.Errorf("%d trailing bytes", len(p))
	}
	return r, nil
}

// CorruptError locates damage in a log file.
type CorruptError struct {
	Path   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("write-ahead log %s is corrupt at byte offset %d: %s", e.Path, e.Offset, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// ReplayReport says what Replay read.
type ReplayReport struct {
	// Segments is the number of segment files read.
	Segments int
	// Records counts the records handed to fn; Skipped those at or before
	// after.
	Records, Skipped int64
	// Last is the LSN of the last record in the log, or after if the log
	// holds none past it.
	Last uint64
	// TornBytes is the size of a torn final record that Replay cut off the
	// last segment (a crash in the middle of a write), and TornFile its
	// file.
	TornBytes int64
	TornFile  string
}

// Replay reads the log in dir and calls fn, in order, for every record
// after the LSN after (the checkpoint's WAL position; 0 for none). Each
// segment is read and checked whole before any of its records is handed
// on, and every record's checksum and LSN are checked.
//
// A final record that the end of the last segment cuts short, or whose
// checksum fails with nothing after it, is the trace of a crash in the
// middle of a write: its write never completed, so it was never
// acknowledged under SyncAlways. Replay truncates it away and reports it.
// Any other damage, a gap in the LSNs, or a log that starts after after+1
// (records the checkpoint does not hold are missing) is an error wrapping
// ErrCorrupt; fn may then have been called for the segments before the
// damaged one, so callers must discard what they built.
func Replay(dir string, after uint64, fn func(*Record) error) (ReplayReport, error) {
	rep := ReplayReport{Last: after}
	segs, err := listSegments(dir)
	if err != nil {
		return rep, err
	}
	// Segments wholly at or before after are not needed (a Cut that did
	// not finish leaves them).
	for len(segs) > 1 && segs[1].first <= after+1 {
		segs = segs[1:]
	}
	if len(segs) > 0 && segs[0].first > after+1 {
		return rep, &CorruptError{Path: segs[0].path, Reason: fmt.Sprintf(
			"the log starts at record %d but the checkpoint holds records up to %d only: records %d to %d are missing",
			segs[0].first, after, after+1, segs[0].first-1)}
	}
	next := uint64(0) // the LSN the next record must have; 0 before the first
	for i, sf := range segs {
		last := i == len(segs)-1
		if next != 0 && sf.first != next {
			return rep, &CorruptError{Path: sf.path, Reason: fmt.Sprintf(
				"segment starts at record %d but the previous one ended at record %d", sf.first, next-1)}
		}
		recs, torn, err := readSegment(sf, last)
		if err != nil {
			return rep, err
		}
		rep.Segments++
		if torn > 0 {
			fi, err := os.Stat(sf.path)
			if err != nil {
				return rep, fmt.Errorf("wal: %w", err)
			}
			if err := truncateDurable(sf.path, fi.Size()-torn); err != nil {
				return rep, fmt.Errorf("wal: truncate torn record off %s: %w", sf.path, err)
			}
			rep.TornBytes, rep.TornFile = torn, sf.path
		}
		next = sf.first
		for j := range recs {
			r := &recs[j]
			if r.LSN != next {
				return rep, &CorruptError{Path: sf.path, Offset: r.Offset, Reason: fmt.Sprintf(
					"record numbered %d where %d was expected", r.LSN, next)}
			}
			next++
			if r.LSN <= after {
				rep.Skipped++
				continue
			}
			if err := fn(r); err != nil {
				return rep, err
			}
			rep.Records++
			rep.Last = r.LSN
		}
	}
	return rep, nil
}

// readSegment reads and checks a whole segment. In the last segment a torn
// final record is not an error: its size is returned.
func readSegment(sf segmentFile, last bool) ([]Record, int64, error) {
	data, err := os.ReadFile(sf.path)
	if err != nil {
		return nil, 0, fmt.Errorf("wal: %w", err)
	}
	bad := func(off int, format string, args ...any) error {
		return &CorruptError{Path: sf.path, Offset: int64(off), Reason: fmt.Sprintf(format, args...)}
	}
	if len(data) < segmentHeaderSize {
		if last {
			// Created, but the crash came before its header was
			// durable: it holds no record.
			return nil, int64(len(data)), nil
		}
		return nil, 0, bad(0, "segment header is cut short (%d bytes)", len(data))
	}
	if [8]byte(data[:8]) != magic {
		return nil, 0, bad(0, "not a reverie write-ahead log segment (bad magic)")
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v != Version {
		return nil, 0, bad(8, "format version %d; this reverie reads version %d", v, Version)
	}
	if f := binary.LittleEndian.Uint64(data[12:]); f != sf.first {
		return nil, 0, bad(12, "header says the first record is %d, the file name says %d", f, sf.first)
	}
	var recs []Record
	off := segmentHeaderSize
	for off < len(data) {
		rest := len(data) - off
		if last && allZero(data[off:]) {
			// A crash can leave a file longer than the data that
			// reached the disk, the rest reading as zeros. No record
			// is all zeros (its LSN is at least 1), and records past
			// the last fsync were not acknowledged: a torn tail.
			return recs, int64(rest), nil
		}
		if rest < frameHeaderSize {
			if last {
				return recs, int64(rest), nil
			}
			return nil, 0, bad(off, "record header cut short")
		}
		n64 := int64(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if n64 > maxPayload {
			if last && int64(off+frameHeaderSize)+n64 > int64(len(data)) {
				return recs, int64(rest), nil
			}
			return nil, 0, bad(off, "record length %d is over the limit", n64)
		}
		n := int(n64)
		end := off + frameHeaderSize + n
		if end > len(data) {
			if last {
				return recs, int64(rest), nil
			}
			return nil, 0, bad(off, "record of %d bytes runs past the end of the file", n)
		}
		payload := data[off+frameHeaderSize : end]
		if n == 0 || crc32.Checksum(payload, castagnoli) != sum {
			// (No record is empty: an LSN is at least 1. A zeroed
			// header reads as an empty record whose checksum matches.)
			if last && tornWrite(data, off, end) {
				return recs, int64(rest), nil
			}
			if n == 0 {
				return nil, 0, bad(off, "record of 0 bytes")
			}
			return nil, 0, bad(off, "record checksum mismatch")
		}
		r, err := decodePayload(payload)
		if err != nil {
			return nil, 0, bad(off, "record does not decode: %v", err)
		}
		r.File, r.Offset = sf.path, int64(off)
		recs = append(recs, r)
		off = end
	}
	return recs, 0, nil
}
