package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func testChunk(key uint64, rows int) *reverbpb.ChunkData {
	return &reverbpb.ChunkData{
		ChunkKey:      key,
		SequenceRange: &reverbpb.SequenceRange{EpisodeId: key / 10, End: int32(rows - 1)},
		Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{
			Dtype:         tensorflowpb.DataType_DT_FLOAT,
			TensorShape:   &tensorflowpb.TensorShapeProto{Dim: []*tensorflowpb.TensorShapeProto_Dim{{Size: int64(rows)}}},
			TensorContent: []byte(strings.Repeat(fmt.Sprint(key%10), 4*rows)),
		}}},
		DataTensorsLen: 1,
	}
}

func testItem(key uint64, tbl string, chunks ...uint64) *reverbpb.PrioritizedItem {
	var slices []*reverbpb.FlatTrajectory_ChunkSlice
	for _, c := range chunks {
		slices = append(slices, &reverbpb.FlatTrajectory_ChunkSlice{ChunkKey: c, Length: 1})
	}
	return &reverbpb.PrioritizedItem{
		Key: key, Table: tbl, Priority: float64(key) / 3, TimesSampled: int32(key % 4),
		InsertedAt:     timestamppb.New(time.Unix(1700000000, int64(key))),
		FlatTrajectory: &reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{ChunkSlices: slices}}},
	}
}

// fixture is what writeFixture writes, in order.
type fixture struct {
	tables []*reverbpb.PriorityTableCheckpoint
	recs   []*Record // as Read should return them
}

// writeFixture writes two tables sharing a chunk, and an empty third one.
func writeFixture(t *testing.T, root string) (string, fixture) {
	t.Helper()
	w, err := Create(root, time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	var fx fixture
	table := func(name string, inserts int64) *reverbpb.PriorityTableCheckpoint {
		h := &reverbpb.PriorityTableCheckpoint{
			TableName:   name,
			MaxSize:     100,
			RateLimiter: &reverbpb.RateLimiterCheckpoint{SamplesPerInsert: 1, MinSizeToSample: 1, MinDiff: -1e300, MaxDiff: 1e300, InsertCount: inserts, SampleCount: 7, DeleteCount: 1},
			Sampler:     &reverbpb.KeyDistributionOptions{Distribution: &reverbpb.KeyDistributionOptions_Uniform{Uniform: true}},
			Remover:     &reverbpb.KeyDistributionOptions{Distribution: &reverbpb.KeyDistributionOptions_Fifo{Fifo: true}},
		}
		if err := w.BeginTable(h); err != nil {
			t.Fatal(err)
		}
		fx.tables = append(fx.tables, h)
		fx.recs = append(fx.recs, &Record{Kind: KindTable, Table: h})
		return h
	}
	chunk := func(c *reverbpb.ChunkData) {
		fresh := !w.HasChunk(c.GetChunkKey())
		if err := w.Chunk(c); err != nil {
			t.Fatal(err)
		}
		if fresh {
			fx.recs = append(fx.recs, &Record{Kind: KindChunk, ChunkBytes: mustMarshal(t, c)})
		}
	}
	// chunkEncoded writes c through ChunkEncoded, as the server does.
	chunkEncoded := func(c *reverbpb.ChunkData) {
		fresh := !w.HasChunk(c.GetChunkKey())
		enc, err := proto.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.ChunkEncoded(c.GetChunkKey(), enc); err != nil {
			t.Fatal(err)
		}
		if fresh {
			fx.recs = append(fx.recs, &Record{Kind: KindChunk, ChunkBytes: mustMarshal(t, c)})
		}
	}
	item := func(it *reverbpb.PrioritizedItem) {
		if err := w.Item(it); err != nil {
			t.Fatal(err)
		}
		fx.recs = append(fx.recs, &Record{Kind: KindItem, Item: it})
	}
	end := func(n int64) {
		if err := w.EndTable(); err != nil {
			t.Fatal(err)
		}
		fx.recs = append(fx.recs, &Record{Kind: KindTableEnd, Count: n})
	}
	table("a", 3)
	chunk(testChunk(11, 3))
	item(testItem(1, "a", 11))
	chunkEncoded(testChunk(12, 2))
	item(testItem(2, "a", 11, 12))
	end(2)
	table("b", 2)
	chunkEncoded(testChunk(12, 2)) // already written: skipped
	item(testItem(3, "b", 12))
	end(1)
	table("empty", 0)
	end(0)
	dir, err := w.Commit()
	if err != nil {
		t.Fatal(err)
	}
	return dir, fx
}

func TestRoundTrip(t *testing.T) {
	root := t.TempDir()
	dir, fx := writeFixture(t, root)
	if want := filepath.Join(root, "2026-01-02T03:04:05.000000006Z"); dir != want {
		t.Fatalf("dir %s, want %s", dir, want)
	}
	if !Complete(dir) {
		t.Fatal("committed checkpoint is not complete")
	}
	if _, err := os.Stat(filepath.Join(dir, FileName+tmpSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left behind: %v", err)
	}
	file, err := Resolve(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []*Record
	sum, err := Load(file, func(r *Record) error {
		got = append(got, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Tables) != 3 || sum.Items != 3 || sum.Chunks != 2 ||
		sum.Tables[0].Items != 2 || sum.Tables[1].Items != 1 || sum.Tables[2].Items != 0 {
		t.Fatalf("summary %+v", sum)
	}
	if len(got) != len(fx.recs) {
		t.Fatalf("read %d records, wrote %d", len(got), len(fx.recs))
	}
	for i, r := range got {
		w := fx.recs[i]
		if r.Kind != w.Kind || r.Count != w.Count || !proto.Equal(r.Table, w.Table) || !proto.Equal(decodeChunk(t, r.ChunkBytes), decodeChunk(t, w.ChunkBytes)) || !proto.Equal(r.Item, w.Item) {
			t.Fatalf("record %d: got %+v, want %+v", i, r, w)
		}
		if i > 0 && r.Offset <= got[i-1].Offset {
			t.Fatalf("record %d offset %d not after %d", i, r.Offset, got[i-1].Offset)
		}
	}
}

// recordSpans returns the kind, start and end offsets of each record.
func recordSpans(t *testing.T, data []byte) (kinds []Kind, starts, ends []int) {
	t.Helper()
	off := headerSize
	for off < len(data) {
		n, k := binary.Uvarint(data[off+1:])
		if k <= 0 {
			t.Fatal("bad fixture")
		}
		kinds = append(kinds, Kind(data[off]))
		starts = append(starts, off)
		off += 1 + k + int(n) + 4
		ends = append(ends, off)
	}
	return
}

// TestCorruptionDetected damages the fixture in every record (each kind)
// and at every truncation point, and checks that Verify and Load fail with
// a CorruptError naming the file and that Load applies nothing.
func TestCorruptionDetected(t *testing.T) {
	root := t.TempDir()
	dir, _ := writeFixture(t, root)
	file := filepath.Join(dir, FileName)
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	kinds, starts, ends := recordSpans(t, orig)
	seen := map[Kind]bool{}
	bad := filepath.Join(t.TempDir(), "bad.rvck")
	check := func(name string, data []byte, wantOffset int) {
		t.Helper()
		if err := os.WriteFile(bad, data, 0o644); err != nil {
			t.Fatal(err)
		}
		applied := 0
		_, err := Load(bad, func(*Record) error { applied++; return nil })
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: Load error %v, want a CorruptError", name, err)
		}
		if applied != 0 {
			t.Fatalf("%s: Load applied %d records of a corrupt file", name, applied)
		}
		if ce.Path != bad || !strings.Contains(err.Error(), bad) {
			t.Fatalf("%s: error does not name the file: %v", name, err)
		}
		if wantOffset >= 0 && ce.Offset != int64(wantOffset) {
			t.Fatalf("%s: error at offset %d, want %d: %v", name, ce.Offset, wantOffset, err)
		}
		if _, err := Verify(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: Verify: %v", name, err)
		}
	}
	// Flip one bit in every byte of every record: kind, length, payload and
	// checksum.
	for r := range kinds {
		seen[kinds[r]] = true
		for off := starts[r]; off < ends[r]; off++ {
			for _, bit := range []byte{0x01, 0x10, 0x80} {
				data := append([]byte(nil), orig...)
				data[off] ^= bit
				// A damaged length may make the record run into the
				// next one; the error is still reported at this record.
				check(fmt.Sprintf("record %d (%s) byte %d bit %#x", r, kinds[r], off-starts[r], bit), data, starts[r])
			}
		}
	}
	for _, k := range []Kind{KindTable, KindChunk, KindItem, KindTableEnd, KindFileEnd} {
		if !seen[k] {
			t.Fatalf("fixture has no %s record", k)
		}
	}
	// Header damage.
	for off := 0; off < len(magic); off++ {
		data := append([]byte(nil), orig...)
		data[off] ^= 1
		check(fmt.Sprintf("magic byte %d", off), data, 0)
	}
	// Truncation at every length, and extension.
	for n := 0; n < len(orig); n++ {
		check(fmt.Sprintf("truncated to %d bytes", n), orig[:n], -1)
	}
	check("trailing garbage", append(append([]byte(nil), orig...), 0), starts[len(starts)-1])

	// A wrong version is not corruption but is refused as clearly.
	data := append([]byte(nil), orig...)
	binary.LittleEndian.PutUint32(data[len(magic):], Version+1)
	if err := os.WriteFile(bad, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(bad); !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("version 2: %v", err)
	}
}

// TestStructuralErrors writes well-checksummed files that break the
// grammar or the counts.
func TestStructuralErrors(t *testing.T) {
	hdr := func(name string) []byte {
		b, _ := proto.Marshal(&reverbpb.PriorityTableCheckpoint{TableName: name})
		return b
	}
	msg := func(m proto.Message) []byte {
		b, _ := proto.Marshal(m)
		return b
	}
	uv := func(vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.AppendUvarint(b, v)
		}
		return b
	}
	type rec struct {
		k Kind
		p []byte
	}
	cases := map[string]struct {
		recs []rec
		want string
	}{
		"item before its chunk": {[]rec{{KindTable, hdr("a")}, {KindItem, msg(testItem(1, "a", 5))}, {KindTableEnd, uv(1)}, {KindFileEnd, uv(1, 1, 0)}}, "references chunk 5"},
		"item of another table": {[]rec{{KindTable, hdr("a")}, {KindChunk, msg(testChunk(5, 1))}, {KindItem, msg(testItem(1, "b", 5))}, {KindTableEnd, uv(1)}, {KindFileEnd, uv(1, 1, 1)}}, `names table "b"`},
		"table count":           {[]rec{{KindTable, hdr("a")}, {KindTableEnd, uv(3)}, {KindFileEnd, uv(1, 3, 0)}}, "counts 3 items"},
		"file count":            {[]rec{{KindTable, hdr("a")}, {KindTableEnd, uv(0)}, {KindFileEnd, uv(2, 0, 0)}}, "counts 2 tables"},
		"unclosed table":        {[]rec{{KindTable, hdr("a")}, {KindFileEnd, uv(1, 0, 0)}}, "inside table"},
		"duplicate table":       {[]rec{{KindTable, hdr("a")}, {KindTableEnd, uv(0)}, {KindTable, hdr("a")}, {KindTableEnd, uv(0)}, {KindFileEnd, uv(2, 0, 0)}}, "appears twice"},
		"duplicate chunk":       {[]rec{{KindTable, hdr("a")}, {KindChunk, msg(testChunk(5, 1))}, {KindChunk, msg(testChunk(5, 1))}, {KindTableEnd, uv(0)}, {KindFileEnd, uv(1, 0, 2)}}, "chunk 5 appears twice"},
		"chunk outside a table": {[]rec{{KindChunk, msg(testChunk(5, 1))}, {KindFileEnd, uv(0, 0, 1)}}, "chunk record outside a table"},
		// Caught by Verify, not first by the load pass: an imported
		// snapshot that verifies must load.
		"duplicate item": {[]rec{{KindTable, hdr("a")}, {KindChunk, msg(testChunk(5, 1))}, {KindItem, msg(testItem(1, "a", 5))}, {KindItem, msg(testItem(1, "a", 5))}, {KindTableEnd, uv(2)}, {KindFileEnd, uv(1, 2, 1)}}, `item 1 appears twice in table "a"`},
		"unknown kind":   {[]rec{{Kind(9), nil}, {KindFileEnd, uv(0, 0, 0)}}, "unknown record kind 9"},
		"no file end":    {[]rec{{KindTable, hdr("a")}, {KindTableEnd, uv(0)}}, "without a file-end record"},
		"bad proto":      {[]rec{{KindTable, []byte{0xff, 0xff}}, {KindTableEnd, uv(0)}, {KindFileEnd, uv(1, 0, 0)}}, "not a valid PriorityTableCheckpoint"},
		// A chunk whose key parses but whose data is cut short inside:
		// Verify must refuse what Read would (it once checked only the
		// key, and an imported snapshot passed and then failed to load).
		"chunk data cut short": {[]rec{{KindTable, hdr("a")}, {KindChunk, []byte{0x08, 0x07, 0x2a, 0x02, 0x0a, 0x80}}, {KindItem, msg(testItem(1, "a", 7))}, {KindTableEnd, uv(1)}, {KindFileEnd, uv(1, 1, 1)}}, "not a valid ChunkData"},
	}
	// Keys are unique per table, not per file.
	cases["same key in two tables"] = struct {
		recs []rec
		want string
	}{[]rec{{KindTable, hdr("a")}, {KindChunk, msg(testChunk(5, 1))}, {KindItem, msg(testItem(1, "a", 5))}, {KindTableEnd, uv(1)}, {KindTable, hdr("b")}, {KindItem, msg(testItem(1, "b", 5))}, {KindTableEnd, uv(1)}, {KindFileEnd, uv(2, 2, 1)}}, ""}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w, err := Create(t.TempDir(), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tc.recs {
				w.record(r.k, r.p)
			}
			w.bw.Flush()
			w.f.Close()
			w.f = nil
			_, err = Verify(w.tmpPath)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid file refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want corrupt: %q", err, tc.want)
			}
		})
	}
}

func TestWriterRefusesBadSequences(t *testing.T) {
	w, err := Create(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := w.Dir()
	if err := w.Item(testItem(1, "a")); err == nil {
		t.Fatal("item outside a table accepted")
	}
	if _, err := w.Commit(); err == nil {
		t.Fatal("commit after an error succeeded")
	}
	w, err = Create(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Chunk(testChunk(5, 1)); err == nil || !strings.Contains(err.Error(), "outside a table") {
		t.Fatalf("chunk outside a table: %v", err)
	}
	w.Abort()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("failed checkpoint left %s: %v", dir, err)
	}

	w, err = Create(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w.BeginTable(&reverbpb.PriorityTableCheckpoint{TableName: "a"})
	if err := w.Item(testItem(1, "a", 9)); err == nil || !strings.Contains(err.Error(), "chunk 9") {
		t.Fatalf("item before its chunk: %v", err)
	}
	w.Abort()
	if _, err := os.Stat(w.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("aborted checkpoint left %s", w.Dir())
	}
}

func TestDirectories(t *testing.T) {
	root := t.TempDir()
	if dir, err := Latest(filepath.Join(root, "missing")); dir != "" || err != nil {
		t.Fatalf("Latest of a missing root: %q %v", dir, err)
	}
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	commit := func(at time.Time) string {
		w, err := Create(root, at)
		if err != nil {
			t.Fatal(err)
		}
		dir, err := w.Commit()
		if err != nil {
			t.Fatal(err)
		}
		return dir
	}
	first := commit(t0)
	// The clock goes back: the new checkpoint still sorts last.
	second := commit(t0.Add(-time.Hour))
	if filepath.Base(second) <= filepath.Base(first) {
		t.Fatalf("second checkpoint %s does not sort after %s", second, first)
	}
	// Same instant: a distinct, later name.
	third := commit(t0)
	if filepath.Base(third) <= filepath.Base(second) {
		t.Fatalf("third checkpoint %s does not sort after %s", third, second)
	}
	// An incomplete, newer directory is ignored by Latest.
	incomplete := filepath.Join(root, DirName(t0.Add(time.Hour)))
	if err := os.Mkdir(incomplete, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(incomplete, FileName+tmpSuffix), []byte("x"), 0o644)
	if got, err := Latest(root); err != nil || got != third {
		t.Fatalf("Latest = %q, %v; want %q", got, err, third)
	}
	if _, err := Resolve(incomplete); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Fatalf("Resolve(incomplete): %v", err)
	}
	other := filepath.Join(root, "notes.txt")
	os.WriteFile(other, nil, 0o644)
	if err := Prune(root, third); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(root)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{filepath.Base(third), "notes.txt"}; fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("after Prune: %v, want %v", names, want)
	}
	if file, err := Resolve(third); err != nil || file != filepath.Join(third, FileName) {
		t.Fatalf("Resolve(dir) = %q, %v", file, err)
	}
	if file, err := Resolve(filepath.Join(third, FileName)); err != nil || file != filepath.Join(third, FileName) {
		t.Fatalf("Resolve(file) = %q, %v", file, err)
	}
}

// TestLargeRecord writes a chunk bigger than the write buffer and gRPC's
// default message limit.
func TestLargeRecord(t *testing.T) {
	w, err := Create(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := testChunk(1, 5<<20) // 20 MiB of tensor content
	w.BeginTable(&reverbpb.PriorityTableCheckpoint{TableName: "a"})
	w.Chunk(c)
	w.Item(testItem(1, "a", 1))
	w.EndTable()
	dir, err := w.Commit()
	if err != nil {
		t.Fatal(err)
	}
	var got *reverbpb.ChunkData
	if _, err := Load(filepath.Join(dir, FileName), func(r *Record) error {
		if r.ChunkBytes != nil {
			got = decodeChunk(t, r.ChunkBytes)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, c) {
		t.Fatal("large chunk differs after the round trip")
	}
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeChunk decodes a record's chunk bytes (nil for none).
func decodeChunk(t testing.TB, b []byte) *reverbpb.ChunkData {
	t.Helper()
	if b == nil {
		return nil
	}
	c := &reverbpb.ChunkData{}
	if err := proto.Unmarshal(b, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReadErrorIsNotCorruption: a path that cannot be read as a file (a
// directory here; EIO in the field) is reported as an I/O error, not as a
// damaged checkpoint, which the docs tell operators to move away.
func TestReadErrorIsNotCorruption(t *testing.T) {
	_, err := Verify(t.TempDir())
	if err == nil || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Verify of a directory: %v, want an error that is not ErrCorrupt", err)
	}
}
