// Package checkpoint reads and writes reverie's checkpoint files: a
// versioned, checksummed stream of records holding tables, chunks and
// items. docs/formats.md describes the layout byte by byte.
//
// A checkpoint is a directory <root>/<UTC time>/ holding checkpoint.rvck
// and, once that file is complete and synced, an empty DONE file. The
// Writer streams records as they come, so a checkpoint never has to fit in
// memory; Verify reads a file through once and checks every checksum and
// count; Load verifies a file and then reads it again, handing each record
// to the caller, so that a corrupt file is rejected before anything is
// applied.
package checkpoint

import (
	"errors"
	"fmt"
	"hash/crc32"
)

// Names inside a checkpoint directory.
const (
	// FileName is the checkpoint file.
	FileName = "checkpoint.rvck"
	// DoneName is the empty file that marks a checkpoint complete.
	DoneName = "DONE"
	// tmpSuffix marks the file while it is being written.
	tmpSuffix = ".tmp"
)

// Version is the format version this package writes and the only one it
// reads.
const Version uint32 = 1

// magic opens every checkpoint file. The high first byte and the CR LF and
// ^Z in it catch transfers that mangle binary files (as PNG's does).
var magic = [8]byte{0x89, 'R', 'V', 'C', 'K', '\r', '\n', 0x1a}

// headerSize is the magic plus the version.
const headerSize = len(magic) + 4

// Kind is the type of a record.
type Kind byte

// The record kinds. A file is: Table, then Chunk and Item records, then
// TableEnd, once per table; then FileEnd.
const (
	// KindTable opens a table: a deepmind.reverb.PriorityTableCheckpoint.
	KindTable Kind = 1
	// KindChunk is a deepmind.reverb.ChunkData, written once per file
	// before the first item that references it.
	KindChunk Kind = 2
	// KindItem is a deepmind.reverb.PrioritizedItem of the open table.
	KindItem Kind = 3
	// KindTableEnd closes the open table: uvarint item count.
	KindTableEnd Kind = 4
	// KindFileEnd ends the file: uvarint tables, items, chunks.
	KindFileEnd Kind = 5
)

func (k Kind) String() string {
	switch k {
	case KindTable:
		return "table"
	case KindChunk:
		return "chunk"
	case KindItem:
		return "item"
	case KindTableEnd:
		return "table-end"
	case KindFileEnd:
		return "file-end"
	}
	return fmt.Sprintf("kind %d", byte(k))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by every error that says a checkpoint file is
// damaged, truncated or not a checkpoint.
var ErrCorrupt = errors.New("checkpoint: corrupt")

// CorruptError locates the damage in a checkpoint file.
type CorruptError struct {
	Path string
	// Offset is the byte offset of the record (or header) that failed.
	Offset int64
	// Record is the 0-based index of the record that failed, or -1 for
	// the file header.
	Record int64
	Reason string
}

func (e *CorruptError) Error() string {
	where := "file header"
	if e.Record >= 0 {
		where = fmt.Sprintf("record %d", e.Record)
	}
	return fmt.Sprintf("checkpoint %s is corrupt at byte offset %d (%s): %s", e.Path, e.Offset, where, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }
