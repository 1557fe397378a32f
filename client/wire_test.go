package client

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/bufpool"
)

// wireRandTensor returns a random valid tensor of dtype dt and shape.
func wireRandTensor(r *rand.Rand, dt DType, shape []int64) Tensor {
	n, _ := shapeElements(shape)
	t := Tensor{DType: dt, Shape: shape}
	if dt == DTString {
		t.Strings = make([][]byte, n)
		for i := range t.Strings {
			s := make([]byte, r.IntN(300))
			for j := range s {
				s[j] = byte(r.UintN(256))
			}
			t.Strings[i] = s
		}
		return t
	}
	size, _ := DTypeSize(dt)
	t.Data = make([]byte, int(n)*size)
	repeat := r.IntN(2) == 0 // compressible content in half the cases
	for i := range t.Data {
		if repeat {
			t.Data[i] = byte(i % 7)
		} else {
			t.Data[i] = byte(r.UintN(256))
		}
	}
	return t
}

var wireInt32s = []int32{0, 1, -1, 127, 128, math.MaxInt32, math.MinInt32}

// TestEncodeChunkWire checks that the writer's hand-encoded chunks decode to
// exactly what EncodeChunk builds for the same stacked rows, and that the
// bytes are those proto.Marshal writes.
func TestEncodeChunkWire(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	dtypes := []DType{DTFloat, DTDouble, DTInt8, DTUint8, DTInt16, DTInt32, DTInt64, DTUint64, DTBool, DTHalf, DTComplex128, DTString}
	shapes := [][]int64{nil, {0}, {1}, {3}, {2, 3}, {4, 0, 2}, {130, 2}, {1, 1, 1, 1, 1, 1}, {20000}}
	for i := 0; i < 600; i++ {
		dt := dtypes[r.IntN(len(dtypes))]
		step := shapes[r.IntN(len(shapes))]
		if dt == DTString && len(step) > 0 && step[0] > 100 {
			step = []int64{5}
		}
		rows := 1 + r.IntN(4)
		ts := make([]Tensor, rows)
		for j := range ts {
			ts[j] = wireRandTensor(r, dt, step)
		}
		stacked, err := Stack(ts)
		if err != nil {
			t.Fatal(err)
		}
		keys := []uint64{0, 1, r.Uint64(), math.MaxUint64}
		h := chunkHead{
			key:     keys[r.IntN(len(keys))],
			episode: keys[r.IntN(len(keys))],
			start:   wireInt32s[r.IntN(len(wireInt32s))],
			end:     wireInt32s[r.IntN(len(wireInt32s))],
			sparse:  r.IntN(2) == 0,
			delta:   r.IntN(2) == 0,
			dtype:   dt,
			shape:   stacked.Shape,
		}
		seq := &reverbpb.SequenceRange{EpisodeId: h.episode, Start: h.start, End: h.end, Sparse: h.sparse}
		want, err := EncodeChunk(h.key, seq, []Tensor{stacked}, h.delta)
		if err != nil {
			t.Fatal(err)
		}
		var enc []byte
		if dt == DTString {
			h.uncompressed = stacked.TotalBytes()
			enc, err = encodeChunkStrings(&h, stacked.Strings)
		} else {
			raw := bytes.Clone(stacked.Data)
			if h.delta && deltaApplies(dt, len(stacked.Shape)) {
				size, _ := DTypeSize(dt)
				deltaEncodeInPlace(raw, size, rowBytes(stacked))
			}
			h.uncompressed = int64(len(raw))
			var pool mem.BufferPool
			if i%2 == 0 {
				pool = &bufpool.Pool{}
			}
			var buf mem.Buffer
			var small *[]byte
			enc, buf, small, err = encodeChunkRaw(&h, raw, pool)
			switch {
			case buf != nil:
				if d := buf.ReadOnlyData(); len(d) != len(enc) || &d[0] != &enc[0] {
					t.Fatalf("case %d: the pooled buffer holds %d bytes, not the %d of the encoding", i, len(d), len(enc))
				}
				defer buf.Free()
			case small != nil:
				if len(enc) >= bigChunkBytes {
					t.Fatalf("case %d: a chunk encoding of %d bytes is pooled as small", i, len(enc))
				}
				d := (*small)[:cap(*small)]
				lo, hi := uintptr(unsafe.Pointer(&d[0])), uintptr(unsafe.Pointer(&d[len(d)-1]))
				if p := uintptr(unsafe.Pointer(&enc[0])); p < lo || p+uintptr(len(enc)-1) > hi {
					t.Fatalf("case %d: the encoding is not in the small pooled buffer", i)
				}
			case pool != nil:
				t.Fatalf("case %d: a chunk encoding of %d bytes from a pool is not pooled", i, len(enc))
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		got := &reverbpb.ChunkData{}
		if err := proto.Unmarshal(enc, got); err != nil {
			t.Fatalf("case %d (%v%v×%d): %v", i, dt, step, rows, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("case %d (%v%v×%d): decoded\n%v\nwant\n%v", i, dt, step, rows, got, want)
		}
		wantBytes, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, wantBytes) {
			t.Fatalf("case %d (%v%v×%d): bytes differ from proto.Marshal\ngot  %x\nwant %x", i, dt, step, rows, enc, wantBytes)
		}
		if cap(enc) != len(enc) {
			t.Fatalf("case %d: encoding has spare capacity %d; appends could write into shared memory", i, cap(enc)-len(enc))
		}
		for _, n := range []int{0, 1, 127, 128, 1 << 14, 1 << 21, 1 << 28} {
			if got, want := h.prefixLen(n), len(h.appendPrefix(nil, n)); got != want {
				t.Fatalf("case %d: prefixLen(%d) = %d, appendPrefix writes %d bytes", i, n, got, want)
			}
		}
	}
}

// wireRandItem returns the arguments of encodeItem and the PrioritizedItem
// the writer built for them before it encoded items by hand.
func wireRandItem(r *rand.Rand) (key uint64, table string, priority float64, slices []itemSlice, colEnd []int, squeeze []bool, want *reverbpb.PrioritizedItem) {
	keys := []uint64{0, 1, r.Uint64(), math.MaxUint64}
	tables := []string{"", "t", "replay_buffer", "täble ✓", string(make([]byte, 200))}
	priorities := []float64{0, math.Copysign(0, -1), 1, -2.5, math.Inf(1), math.NaN(), math.SmallestNonzeroFloat64}
	key = keys[r.IntN(len(keys))]
	table = tables[r.IntN(len(tables))]
	priority = priorities[r.IntN(len(priorities))]
	traj := &reverbpb.FlatTrajectory{}
	for c := r.IntN(4); c >= 0; c-- {
		col := &reverbpb.FlatTrajectory_Column{Squeeze: r.IntN(2) == 0}
		for s := r.IntN(4); s >= 0; s-- {
			sl := itemSlice{key: keys[r.IntN(len(keys))], offset: wireInt32s[r.IntN(len(wireInt32s))], length: wireInt32s[r.IntN(len(wireInt32s))]}
			slices = append(slices, sl)
			col.ChunkSlices = append(col.ChunkSlices, &reverbpb.FlatTrajectory_ChunkSlice{ChunkKey: sl.key, Offset: sl.offset, Length: sl.length})
		}
		colEnd = append(colEnd, len(slices))
		squeeze = append(squeeze, col.Squeeze)
		traj.Columns = append(traj.Columns, col)
	}
	want = &reverbpb.PrioritizedItem{Key: key, Table: table, Priority: priority, FlatTrajectory: traj}
	return
}

// TestEncodeItemWire checks that hand-encoded items decode to the
// PrioritizedItem the writer used to build, byte for byte as proto.Marshal
// writes it.
func TestEncodeItemWire(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for i := 0; i < 2000; i++ {
		key, table, priority, slices, colEnd, squeeze, want := wireRandItem(r)
		enc := encodeItem(key, table, priority, slices, colEnd, squeeze)
		got := &reverbpb.PrioritizedItem{}
		if err := proto.Unmarshal(enc, got); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("case %d: decoded\n%v\nwant\n%v", i, got, want)
		}
		wantBytes, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, wantBytes) {
			t.Fatalf("case %d: bytes differ from proto.Marshal\ngot  %x\nwant %x", i, enc, wantBytes)
		}
		if cap(enc) != len(enc) {
			t.Fatalf("case %d: size computed as %d, encoding has %d bytes", i, cap(enc), len(enc))
		}
	}
}

// TestInsertRequestWire checks the request codec: the buffers it hands to
// gRPC, joined, are what proto.Marshal writes for the InsertStreamRequest
// of the same chunks, items and keep_chunk_keys, and the encodings of big
// chunks are referenced, not copied.
func TestInsertRequestWire(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	pool := &bufpool.Pool{Poison: true}
	sizes := []int{0, 1, 100, 400, bigChunkBytes - 40, bigChunkBytes + 10, 100_000}
	for i := 0; i < 300; i++ {
		req := &insertRequest{}
		var writerRefs []*smallBuf // the writer's references, dropped after marshal
		want := &reverbpb.InsertStreamRequest{}
		for c := r.IntN(6); c > 0; c-- {
			n := sizes[r.IntN(len(sizes))]
			h := chunkHead{key: r.Uint64(), episode: r.Uint64(), start: 3, end: 3, dtype: DTUint8, shape: []int64{1, int64(n)}, uncompressed: int64(n)}
			data := make([]byte, n)
			for j := range data {
				data[j] = byte(r.UintN(256))
			}
			enc, buf, small, err := encodeChunkRaw(&h, data, pool)
			if err != nil {
				t.Fatal(err)
			}
			if small != nil {
				// As a writer does: one reference for the writer's chunk,
				// one for the request, which marshal drops.
				s := &smallBuf{}
				s.init(small, pool)
				s.ref()
				req.smalls = append(req.smalls, s)
				writerRefs = append(writerRefs, s)
			}
			if buf != nil && r.IntN(2) == 0 {
				// The request's reference, handed over to gRPC.
				buf.Ref()
				req.bufs = append(req.bufs, make([]mem.Buffer, len(req.chunks)+1-len(req.bufs))...)
				req.bufs[len(req.chunks)] = buf
			}
			if buf != nil {
				defer buf.Free()
			}
			req.chunks = append(req.chunks, enc)
			cd := &reverbpb.ChunkData{}
			if err := proto.Unmarshal(enc, cd); err != nil {
				t.Fatal(err)
			}
			want.Chunks = append(want.Chunks, cd)
		}
		for n := r.IntN(5); n > 0 || len(req.chunks) == 0 && len(req.items) == 0; n-- {
			key, table, priority, slices, colEnd, squeeze, item := wireRandItem(r)
			req.items = append(req.items, encodeItem(key, table, priority, slices, colEnd, squeeze))
			want.Items = append(want.Items, item)
		}
		for n := r.IntN(4); n > 0; n-- {
			k := []uint64{0, 1, r.Uint64()}[r.IntN(3)]
			req.keep = append(req.keep, k)
			want.KeepChunkKeys = append(want.KeepChunkKeys, k)
		}
		want2 := req.appendTo(nil) // before marshal releases anything
		bufs := req.marshal(pool)
		if len(req.smalls) != 0 {
			t.Fatalf("case %d: marshal kept %d small buffer references", i, len(req.smalls))
		}
		// The writer lets go of its small chunks: their buffers go back to
		// the pool, which poisons them. The request's bytes are copies.
		for _, s := range writerRefs {
			if n := s.refs.Load(); n != 1 {
				t.Fatalf("case %d: a small chunk buffer has %d references after marshal, want the writer's 1", i, n)
			}
			s.release()
		}
		joined := bufs.Materialize()
		if len(joined) != req.size() {
			t.Fatalf("case %d: %d bytes, size() says %d", i, len(joined), req.size())
		}
		if !bytes.Equal(joined, want2) {
			t.Fatalf("case %d: buffers differ from appendTo", i)
		}
		got := &reverbpb.InsertStreamRequest{}
		if err := proto.Unmarshal(joined, got); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("case %d: decoded request differs from the request built with reverbpb", i)
		}
		wantBytes, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(joined, wantBytes) {
			t.Fatalf("case %d: bytes differ from proto.Marshal", i)
		}
		// Big chunks are handed over as they are.
		for _, c := range req.chunks {
			if len(c) < bigChunkBytes {
				continue
			}
			found := false
			for _, b := range bufs {
				d := b.ReadOnlyData()
				if len(d) == len(c) && &d[0] == &c[0] {
					found = true
				}
			}
			if !found {
				t.Fatalf("case %d: chunk of %d bytes was copied", i, len(c))
			}
		}
		bufs.Free()
	}
}
