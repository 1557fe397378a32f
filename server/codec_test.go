package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// split cuts b into pieces of at most n bytes, as gRPC hands a large
// message to the codec.
func split(b []byte, n int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		s = append(s, mem.SliceBuffer(b[:k]))
		b = b[k:]
	}
	return s
}

// decodeInsert decodes b as the codec does, whole and in 3-byte pieces,
// and checks the codec against proto.Unmarshal: both must fail, or both
// succeed with the same request.
func decodeInsert(t testing.TB, b []byte) *insertRequest {
	t.Helper()
	var whole, pieces insertRequest
	whole.decodeInto(mem.BufferSlice{mem.SliceBuffer(b)}, nil)
	pieces.decodeInto(split(b, 3), nil)
	if fmt.Sprint(whole.err) != fmt.Sprint(pieces.err) {
		t.Fatalf("decoded whole: %v; in pieces: %v", whole.err, pieces.err)
	}
	want := &reverbpb.InsertStreamRequest{}
	uerr := proto.Unmarshal(b, want)
	if (uerr == nil) != (whole.err == nil) {
		t.Fatalf("codec: %v, but proto.Unmarshal: %v", whole.err, uerr)
	}
	if uerr != nil {
		return &whole
	}
	// The codec skips unknown fields of the request itself and of its
	// items (those of chunks and trajectories stay in their bytes), and
	// reads only the fields of an item that the server uses.
	want.ProtoReflect().SetUnknown(nil)
	for _, it := range want.Items {
		it.ProtoReflect().SetUnknown(nil)
		it.TimesSampled, it.InsertedAt = 0, nil
	}
	for _, got := range []*insertRequest{&whole, &pieces} {
		if g := got.message(t); !proto.Equal(g, want) {
			t.Fatalf("codec decoded %v, proto.Unmarshal %v", g, want)
		}
		for i, ch := range got.chunks {
			if m := chunkstore.MetaOf(want.Chunks[i]); ch.meta.Key != m.Key || ch.meta.Episode != m.Episode || !slices.Equal(ch.meta.Rows, m.Rows) {
				t.Fatalf("chunks[%d]: metadata %+v, decoded %+v", i, ch.meta, m)
			}
		}
	}
	return &whole
}

// message decodes m's chunks back into an InsertStreamRequest.
func (m *insertRequest) message(t testing.TB) *reverbpb.InsertStreamRequest {
	req := &reverbpb.InsertStreamRequest{KeepChunkKeys: m.keep}
	for _, it := range m.items {
		pi := &reverbpb.PrioritizedItem{Key: it.key, Table: it.table, Priority: it.priority}
		if it.traj != nil {
			pi.FlatTrajectory = &reverbpb.FlatTrajectory{}
			if err := proto.Unmarshal(it.traj, pi.FlatTrajectory); err != nil {
				t.Fatal(err)
			}
		}
		req.Items = append(req.Items, pi)
	}
	for _, ch := range m.chunks {
		d := &reverbpb.ChunkData{}
		if err := proto.Unmarshal(ch.enc, d); err != nil {
			t.Fatal(err)
		}
		req.Chunks = append(req.Chunks, d)
	}
	return req
}

// insertRequestOf passes req through the codec.
func insertRequestOf(t testing.TB, req *reverbpb.InsertStreamRequest) *insertRequest {
	return decodeInsert(t, mustMarshal(t, req))
}

func decodeResponse(m *rawMessage) (*reverbpb.SampleStreamResponse, error) {
	resp := &reverbpb.SampleStreamResponse{}
	return resp, proto.Unmarshal(m.data.Materialize(), resp)
}

func TestDecodeInsertErrors(t *testing.T) {
	good := mustMarshal(t, &reverbpb.InsertStreamRequest{
		Chunks: []*reverbpb.ChunkData{fuzzSeedChunk(1, 3)},
		Items:  []*reverbpb.PrioritizedItem{fuzzSeedItem(10, "prio", 1, 1, 0, 3)},
	})
	badName := protowire.AppendTag(nil, 2, protowire.BytesType) // Dim.name
	badName = protowire.AppendBytes(badName, []byte{0xc0})
	for _, wrap := range []protowire.Number{2, 2, 1, 5} { // dim, tensor_shape, tensors, data
		b := protowire.AppendTag(nil, wrap, protowire.BytesType)
		badName = protowire.AppendBytes(b, badName)
	}
	badChunk := protowire.AppendBytes(protowire.AppendTag(slices.Clone(good), 1, protowire.BytesType), badName)
	badItem := protowire.AppendBytes(protowire.AppendTag(slices.Clone(good), 2, protowire.BytesType), []byte{0x1a, 0x01, 0xff})

	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"truncated chunk", good[:10], "chunks[0] at byte 0: unexpected end of message"},
		{"bad chunk", badChunk, "chunks[1].data.tensors.tensor_shape.dim.name: string field contains invalid UTF-8"},
		{"bad item", badItem, "items[1].deprecated_chunk_keys: packed: unexpected EOF"},
		{"bad tag", append(slices.Clone(good), 0x80), "tag at byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := decodeInsert(t, tc.b)
			if req.err == nil || !strings.Contains(req.err.Error(), tc.want) {
				t.Fatalf("decode error %v, want one containing %q", req.err, tc.want)
			}
			if c := status.Code(toStatus(req.err)); c != codes.InvalidArgument {
				t.Fatalf("code %v, want InvalidArgument", c)
			}
		})
	}
}

// TestSampleResponsesMatchProto builds responses from stored bytes and the
// same responses the way the server used to (messages marshaled with
// proto.Marshal), and checks that both decode to the same messages, with
// the same framing: small and big chunks, samples across the 2 MiB mark.
func TestSampleResponsesMatchProto(t *testing.T) {
	store := chunkstore.New()
	var samples []table.Sampled
	sizes := []int{300, 40 << 10, 1 << 20, 700 << 10, 10, inlineChunkBytes, inlineChunkBytes - 1}
	for i := range 40 {
		it := table.Item{Key: uint64(i + 1), Priority: float64(i), TimesSampled: int32(i), InsertedAt: int64(i) * 1e9}
		traj := &reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{}}}
		for j := range 1 + i%3 {
			key := uint64(100*i + j)
			cd := &reverbpb.ChunkData{ChunkKey: key, SequenceRange: &reverbpb.SequenceRange{EpisodeId: 4},
				Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{TensorContent: bytes.Repeat([]byte{byte(i)}, sizes[(i+j)%len(sizes)])}}}}
			c := store.Insert(cd)
			defer c.Unref()
			it.Chunks = append(it.Chunks, c)
			sl := &reverbpb.FlatTrajectory_ChunkSlice{ChunkKey: key, Length: 1}
			traj.Columns[0].ChunkSlices = append(traj.Columns[0].ChunkSlices, sl)
		}
		it.Trajectory = table.EncodeTrajectory(traj)
		samples = append(samples, table.Sampled{Item: it, Probability: 0.5, TableSize: 40, RateLimited: i%2 == 0})
	}

	var got []*reverbpb.SampleStreamResponse
	var rb responseBuilder
	for _, batch := range [][]table.Sampled{samples[:1], samples[1:25], samples[25:]} {
		err := rb.sendSamples("t", batch, func(m *rawMessage) error {
			resp, err := decodeResponse(m)
			got = append(got, resp)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var want []*reverbpb.SampleStreamResponse
	for _, batch := range [][]table.Sampled{samples[:1], samples[1:25], samples[25:]} {
		if err := oldSendSamples("t", batch, func(r *reverbpb.SampleStreamResponse) error {
			// As gRPC's proto codec sent it.
			resp := &reverbpb.SampleStreamResponse{}
			want = append(want, resp)
			return proto.Unmarshal(mustMarshal(t, r), resp)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d responses, want %d", len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("response %d differs:\ngot  %.300v\nwant %.300v", i, got[i], want[i])
		}
	}
}

// oldSendSamples is sendSamples as it was before responses were built by
// hand, for TestSampleResponsesMatchProto.
func oldSendSamples(tableName string, samples []table.Sampled, send func(*reverbpb.SampleStreamResponse) error) error {
	resp := &reverbpb.SampleStreamResponse{}
	size := 0
	flush := func() error {
		if len(resp.Entries) == 0 {
			return nil
		}
		err := send(resp)
		resp, size = &reverbpb.SampleStreamResponse{}, 0
		return err
	}
	for i := range samples {
		sm := &samples[i]
		entry := &reverbpb.SampleStreamResponse_SampleEntry{Info: sampleInfo(tableName, sm)}
		resp.Entries = append(resp.Entries, entry)
		for j, c := range sm.Item.Chunks {
			data, err := c.Data()
			if err != nil {
				return err
			}
			entry.Data = append(entry.Data, data)
			size += c.Size()
			if size >= maxResponseChunkBytes && j < len(sm.Item.Chunks)-1 {
				if err := flush(); err != nil {
					return err
				}
				entry = &reverbpb.SampleStreamResponse_SampleEntry{}
				resp.Entries = append(resp.Entries, entry)
			}
		}
		entry.EndOfSequence = true
		if size >= maxResponseChunkBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// sampleInfo is the SampleInfo of sm as a message, for comparisons.
func sampleInfo(tableName string, sm *table.Sampled) *reverbpb.SampleInfo {
	traj := &reverbpb.FlatTrajectory{}
	if err := proto.Unmarshal(sm.Item.Trajectory, traj); err != nil {
		panic(err)
	}
	return &reverbpb.SampleInfo{
		Item: &reverbpb.PrioritizedItem{
			Key:            sm.Item.Key,
			Table:          tableName,
			Priority:       sm.Item.Priority,
			TimesSampled:   sm.Item.TimesSampled,
			InsertedAt:     timestamppb.New(time.Unix(0, sm.Item.InsertedAt)),
			FlatTrajectory: traj,
		},
		Probability: sm.Probability,
		TableSize:   sm.TableSize,
		RateLimited: sm.RateLimited,
	}
}

func TestBufferPool(t *testing.T) {
	p := &bufferPool{max: 1 << 10}
	if b := p.Get(10); len(*b) != 10 {
		t.Fatalf("Get(10) has length %d", len(*b))
	}
	small := make([]byte, 100, 512)
	p.Put(&small)
	if len(small) != 0 {
		t.Errorf("Put left a length of %d, want 0", len(small))
	}
	big := make([]byte, 0, 2<<10)
	p.Put(&big) // over max: dropped
	for range 10 {
		if b := p.Get(0); cap(*b) > p.max {
			t.Fatalf("Get returned a buffer of capacity %d, over max %d", cap(*b), p.max)
		}
	}
	if b := p.Get(600); len(*b) != 600 {
		t.Fatalf("Get(600) has length %d", len(*b))
	}
}

// touched keeps BenchmarkSendSamples's reads.
var touched uint64

// BenchmarkSendSamples frames batches of 128 samples drawn at random from
// a store of 400-byte chunks, with and without asking for their bytes
// ahead of the copy (prefetchAhead). With 2^19 chunks (about 300 MB) the
// chunks are not in any cache, as in a full replay table; with 2^12 they
// are.
func BenchmarkSendSamples(b *testing.B) {
	for _, n := range []int{1 << 12, 1 << 19} {
		store := chunkstore.New()
		items := make([]table.Item, n)
		traj := table.EncodeTrajectory(&reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{
			ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: 1, Length: 1}}, Squeeze: true}}})
		payload := make([]byte, 400)
		for i := range items {
			payload[0], payload[1], payload[2] = byte(i), byte(i>>8), byte(i>>16)
			c := store.Insert(&reverbpb.ChunkData{ChunkKey: uint64(i + 1), SequenceRange: &reverbpb.SequenceRange{EpisodeId: uint64(i)},
				Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{TensorContent: payload}}}})
			items[i] = table.Item{Key: uint64(i + 1), Priority: 1, Trajectory: traj, Chunks: []*chunkstore.Chunk{c}}
		}
		rng := rand.New(rand.NewPCG(1, 2))
		batch := make([]table.Sampled, 128)
		for _, ahead := range []int{0, prefetchAhead} {
			b.Run(fmt.Sprintf("items=%d/prefetch=%d", n, ahead), func(b *testing.B) {
				defer func(old int) { prefetchAhead = old }(prefetchAhead)
				prefetchAhead = ahead
				var rb responseBuilder
				var sink uint64
				send := func(m *rawMessage) error { m.data.Free(); return nil }
				for b.Loop() {
					for i := range batch {
						batch[i] = table.Sampled{Item: items[rng.IntN(n)], Probability: 1 / float64(n), TableSize: int64(n)}
					}
					// As the table does before it hands samples over
					// (Table.drawAheadLocked).
					for i := range batch {
						sink ^= batch[i].Item.Chunks[0].Touch()
					}
					if err := rb.sendSamples("replay", batch, send); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/sample")
				touched = sink
			})
		}
		for i := range items {
			items[i].Chunks[0].Unref()
		}
	}
}

// TestDecodeChunksIntoStore: with a chunk store, the codec copies chunks of
// 32 KiB or more into the store's buffers (across gRPC's pieces, here cut
// at odd places) and smaller ones as before; the bytes are the chunks'
// encodings either way.
func TestDecodeChunksIntoStore(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var chunks []*reverbpb.ChunkData
	for i, n := range []int{100_000, 1_000, 40_000, 32_000} {
		chunks = append(chunks, bytesChunk(rng, uint64(10+i), n))
	}
	b, err := proto.Marshal(&reverbpb.InsertStreamRequest{Chunks: chunks})
	if err != nil {
		t.Fatal(err)
	}
	store := chunkstore.New()
	var m insertRequest
	m.decodeInto(split(b, 16<<10-7), store)
	if m.err != nil {
		t.Fatal(m.err)
	}
	if len(m.chunks) != len(chunks) {
		t.Fatalf("decoded %d chunks, want %d", len(m.chunks), len(chunks))
	}
	for i, ch := range m.chunks {
		want, err := proto.Marshal(chunks[i])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ch.enc, want) {
			t.Fatalf("chunks[%d]: decoded bytes differ from its encoding", i)
		}
		if big := len(want) >= 32<<10; ch.fromStore != big {
			t.Fatalf("chunks[%d] of %d bytes: from the store %v, want %v", i, len(want), ch.fromStore, big)
		}
	}
}

// bytesChunk is a one-row chunk (key) of one uint8 tensor of n bytes from
// rng, stored uncompressed.
func bytesChunk(rng *rand.Rand, key uint64, n int) *reverbpb.ChunkData {
	content := make([]byte, n)
	for j := range content {
		content[j] = byte(rng.Uint32())
	}
	return &reverbpb.ChunkData{
		ChunkKey:      key,
		SequenceRange: &reverbpb.SequenceRange{EpisodeId: 1, Start: 0, End: 0},
		Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{
			Dtype:         tensorflowpb.DataType_DT_UINT8,
			TensorShape:   &tensorflowpb.TensorShapeProto{Dim: []*tensorflowpb.TensorShapeProto_Dim{{Size: 1}, {Size: int64(n)}}},
			TensorContent: content,
		}}},
		DataTensorsLen: 1,
	}
}

// chunkRequest encodes an InsertStreamRequest of one chunk of n random
// bytes (key) and one item referring to it.
func chunkRequest(t testing.TB, key uint64, n int) []byte {
	t.Helper()
	b, err := proto.Marshal(&reverbpb.InsertStreamRequest{
		Chunks: []*reverbpb.ChunkData{bytesChunk(rand.New(rand.NewPCG(key, 9)), key, n)},
		Items:  []*reverbpb.PrioritizedItem{{Key: key + 1, Table: "t", Priority: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodeReusesReader: an insertRequest decodes request after request
// with the same reader, each whole and right, and keeps no reference to a
// request's buffers (gRPC reuses them) once decodeInto returns.
func TestDecodeReusesReader(t *testing.T) {
	var m insertRequest
	for i, n := range []int{400_000, 3_000, 40_000, 0} {
		b := chunkRequest(t, uint64(100+10*i), n)
		var want reverbpb.InsertStreamRequest
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		m.decodeInto(split(b, 16<<10-7), nil)
		if m.err != nil {
			t.Fatalf("request %d: %v", i, m.err)
		}
		wantChunk, _ := proto.Marshal(want.Chunks[0])
		if len(m.chunks) != 1 || !bytes.Equal(m.chunks[0].enc, wantChunk) || len(m.items) != 1 || m.items[0].key != want.Items[0].Key {
			t.Fatalf("request %d (chunk of %d bytes) decoded wrong", i, n)
		}
		r := &m.reader
		if r.cur != nil || r.rest != nil || r.store != nil {
			t.Fatalf("request %d: the reader still holds the message", i)
		}
		for _, v := range r.bufs[:cap(r.bufs)] {
			if v != nil {
				t.Fatalf("request %d: the reader still holds one of gRPC's buffers", i)
			}
		}
		for _, v := range r.views[:cap(r.views)] {
			if v != nil {
				t.Fatalf("request %d: the reader still holds a view of gRPC's buffers", i)
			}
		}
		if !m.reset() {
			t.Fatalf("request %d: reset would drop the request", i)
		}
	}
}

// BenchmarkDecodeInsert: one request of a chunk of PAYLOAD bytes and an
// item, in gRPC's 16 KiB buffers, decoded into a recycled insertRequest
// as an insert stream does. The chunk's buffer is the one allocation a
// request needs (in a full table the store reuses evicted chunks' buffers
// for 32 KiB and more); 2026-11-26, before the reader was reused: 3, 8
// and 14 allocations, 152, 464 and 3,408 bytes besides the chunk's.
func BenchmarkDecodeInsert(b *testing.B) {
	for _, n := range []int{400, 40_000, 400_000} {
		b.Run(fmt.Sprintf("payload=%d", n), func(b *testing.B) {
			data := split(chunkRequest(b, 1, n), 16<<10)
			store := chunkstore.New()
			var m insertRequest
			b.ReportAllocs()
			for b.Loop() {
				m.decodeInto(data, store)
				if m.err != nil {
					b.Fatal(m.err)
				}
				m.reset()
			}
		})
	}
}

// countingPool is a mem.BufferPool that counts the buffers given back.
type countingPool struct{ puts int }

func (p *countingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p *countingPool) Put(*[]byte)       { p.puts++ }

// TestDecodeTakesSplitChunks: a request cut as reverie's own transport cuts
// it (chunkBodies.split) has each large chunk's encoding as a buffer of its
// own, which the codec keeps instead of copying: freeing the message does
// not give that buffer back to its pool. A chunk that shares its buffer
// with more than a few KiB of other fields is copied.
func TestDecodeTakesSplitChunks(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	chunks := []*reverbpb.ChunkData{bytesChunk(rng, 1, 40_000), bytesChunk(rng, 2, 50_000), bytesChunk(rng, 3, 1_000)}
	b, err := proto.Marshal(&reverbpb.InsertStreamRequest{Chunks: chunks, Items: []*reverbpb.PrioritizedItem{{Key: 1, Table: "t", Priority: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	// Cut b as split does, into the pools' buffers.
	pool := &countingPool{}
	var data mem.BufferSlice
	var bodies [][]byte
	for rest := b; len(rest) > 0; {
		k, m, p := chunkBodies{}.split(insertStreamMethod, len(rest), rest[:min(16, len(rest))])
		if k+m == 0 {
			data = append(data, mem.SliceBuffer(rest))
			break
		}
		if p == nil {
			t.Fatalf("split gave no pool for %d bytes", m)
		}
		data = append(data, mem.SliceBuffer(rest[:k]))
		body := pool.Get(m)
		copy(*body, rest[k:k+m])
		bodies = append(bodies, *body)
		data = append(data, mem.NewBuffer(body, pool))
		rest = rest[k+m:]
	}
	if len(bodies) != 2 {
		t.Fatalf("split cut %d chunk bodies, want the 2 large ones", len(bodies))
	}
	var m insertRequest
	m.decodeInto(data, chunkstore.New())
	data.Free()
	if m.err != nil {
		t.Fatal(m.err)
	}
	for i, ch := range m.chunks {
		want, _ := proto.Marshal(chunks[i])
		if !bytes.Equal(ch.enc, want) {
			t.Fatalf("chunks[%d]: bytes differ", i)
		}
		if i < 2 && (&ch.enc[0] != &bodies[i][0] || !ch.fromStore) {
			t.Errorf("chunks[%d] was copied, not taken", i)
		}
	}
	if pool.puts != 0 {
		t.Errorf("%d taken buffers went back to their pool", pool.puts)
	}

	// The same chunk in a buffer with 8 KiB of other bytes after it: copied,
	// and the buffer goes back.
	enc, _ := proto.Marshal(chunks[0])
	head := protowire.AppendVarint([]byte{0x0a}, uint64(len(enc)))
	body := pool.Get(len(enc) + 8<<10)
	copy(*body, enc)
	clear((*body)[len(enc):])
	// keep_chunk_keys, packed: 8 KiB of zero keys.
	tail := protowire.AppendTag(nil, insertKeepField, protowire.BytesType)
	tail = protowire.AppendVarint(tail, uint64(8<<10-len(tail)-2))
	copy((*body)[len(enc):], tail)
	var m2 insertRequest
	data = mem.BufferSlice{mem.SliceBuffer(head), mem.NewBuffer(body, pool)}
	m2.decodeInto(data, chunkstore.New())
	data.Free()
	if m2.err != nil {
		t.Fatal(m2.err)
	}
	if len(m2.chunks) != 1 || &m2.chunks[0].enc[0] == &(*body)[0] {
		t.Fatalf("a chunk with 8 KiB after it in its buffer was taken (err %v)", m2.err)
	}
	if pool.puts != 1 {
		t.Errorf("the untaken buffer was put back %d times, want 1", pool.puts)
	}
}

// TestDecodeSkipsGroupsInPlace: groups in a request (never sent by a
// Reverb client, valid protobuf all the same) are skipped as
// proto.Unmarshal skips them, and in place. The codec used to copy the
// rest of the request after each group, so that a request of many small
// groups cost time quadratic in its size: 11.8 s for 512 KiB of empty
// groups sent to the server (found by review). Allocations count the
// copies: the decode of 20,000 groups makes a few, not one per group.
func TestDecodeSkipsGroupsInPlace(t *testing.T) {
	good := mustMarshal(t, &reverbpb.InsertStreamRequest{
		Chunks: []*reverbpb.ChunkData{fuzzSeedChunk(1, 3)},
		Items:  []*reverbpb.PrioritizedItem{fuzzSeedItem(10, "prio", 1, 1, 0, 3)},
	})
	group := func(num protowire.Number, body ...byte) []byte {
		b := protowire.AppendTag(nil, num, protowire.StartGroupType)
		b = append(b, body...)
		return protowire.AppendTag(b, num, protowire.EndGroupType)
	}
	field := func(num protowire.Number, typ protowire.Type, v ...byte) []byte {
		return append(protowire.AppendTag(nil, num, typ), v...)
	}
	var body []byte
	body = append(body, field(1, protowire.VarintType, 0x96, 0x01)...)
	body = append(body, field(2, protowire.Fixed32Type, 1, 2, 3, 4)...)
	body = append(body, field(3, protowire.Fixed64Type, 1, 2, 3, 4, 5, 6, 7, 8)...)
	body = append(body, field(4, protowire.BytesType, 3, 'a', 'b', 'c')...)
	body = append(body, group(5, group(6)...)...)
	nested := group(15, body...)

	for _, tc := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"groups around a request", slices.Concat(group(15), good, nested, group(16)), true},
		{"unclosed group", slices.Concat(good, protowire.AppendTag(nil, 15, protowire.StartGroupType)), false},
		{"mismatched end", slices.Concat(good, protowire.AppendTag(nil, 15, protowire.StartGroupType), protowire.AppendTag(nil, 16, protowire.EndGroupType)), false},
		{"bytes past the end in a group", slices.Concat(good, protowire.AppendTag(nil, 15, protowire.StartGroupType), field(4, protowire.BytesType, 9, 'a')), false},
		{"bad wire type in a group", slices.Concat(good, protowire.AppendTag(nil, 15, protowire.StartGroupType), []byte{0x0f}), false},
		{"field 0 in a group", slices.Concat(good, protowire.AppendTag(nil, 15, protowire.StartGroupType), []byte{0x00}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := decodeInsert(t, tc.b) // against proto.Unmarshal, whole and in pieces
			if (req.err == nil) != tc.ok {
				t.Fatalf("decode error %v, want ok=%v", req.err, tc.ok)
			}
		})
	}

	var many []byte
	for range 20000 {
		many = append(many, group(15)...)
	}
	many = append(many, good...)
	data := split(many, 16<<10)
	var req insertRequest
	allocs := testing.AllocsPerRun(3, func() {
		req = insertRequest{}
		req.decodeInto(data, nil)
	})
	if req.err != nil || len(req.items) != 1 {
		t.Fatalf("decode: %v, %d items", req.err, len(req.items))
	}
	if allocs > 100 {
		t.Fatalf("%v allocations to skip 20,000 empty groups", allocs)
	}
}
