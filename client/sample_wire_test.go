package client

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
)

// The tests below compare the hand-written decoder of SampleStreamResponse
// with proto.Unmarshal: on random valid messages, on messages with repeated
// singular fields, unknown fields and known fields of another wire type,
// and on random corruptions of them, both must accept or both reject, and
// what the decoder keeps must equal what proto.Unmarshal decodes.

// swRand builds random messages.
type swRand struct{ *rand.Rand }

func (r swRand) pick(n int) int { return r.IntN(n) }

func (r swRand) u64() uint64 {
	return []uint64{0, 1, 127, 128, 300, math.MaxUint32, math.MaxUint64, r.Uint64()}[r.pick(8)]
}

func (r swRand) i32() int32 {
	return []int32{0, 1, -1, 5, 1 << 20, math.MaxInt32, math.MinInt32}[r.pick(7)]
}

func (r swRand) f64() float64 {
	return []float64{0, math.Copysign(0, -1), 0.25, -3, math.Inf(-1), math.NaN(), 1e300}[r.pick(7)]
}

func (r swRand) str() string {
	return []string{"", "t", "replay", "täble ✓", strings.Repeat("x", 200)}[r.pick(5)]
}

func (r swRand) bytes(max int) []byte {
	b := make([]byte, r.pick(max+1))
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return b
}

func (r swRand) tensor() *tensorflowpb.TensorProto {
	t := &tensorflowpb.TensorProto{Dtype: tensorflowpb.DataType(r.pick(25)), VersionNumber: r.i32()}
	if r.pick(4) > 0 {
		t.TensorShape = &tensorflowpb.TensorShapeProto{UnknownRank: r.pick(8) == 0}
		for n := r.pick(4); n > 0; n-- {
			t.TensorShape.Dim = append(t.TensorShape.Dim, &tensorflowpb.TensorShapeProto_Dim{
				Size: []int64{0, 1, 3, -1, math.MaxInt64}[r.pick(5)], Name: r.str(),
			})
		}
	}
	if r.pick(4) > 0 {
		t.TensorContent = r.bytes(60)
	}
	switch r.pick(8) {
	case 0:
		t.FloatVal = []float32{1, 2.5}
	case 1:
		t.StringVal = [][]byte{[]byte("a"), {}}
	case 2:
		t.Int64Val = []int64{-1}
		t.HalfVal = []int32{3}
	case 3:
		t.Uint64Val = []uint64{math.MaxUint64}
		t.BoolVal = []bool{true, false}
	}
	return t
}

func (r swRand) chunk() *reverbpb.ChunkData {
	c := &reverbpb.ChunkData{ChunkKey: r.u64(), DeltaEncoded: r.pick(2) == 0, DataTensorsLen: r.i32(), DataUncompressedSize: int64(r.u64())}
	if r.pick(3) > 0 {
		c.SequenceRange = &reverbpb.SequenceRange{EpisodeId: r.u64(), Start: r.i32(), End: r.i32(), Sparse: r.pick(2) == 0}
	}
	if r.pick(3) > 0 {
		c.Data = &reverbpb.ChunkData_Data{}
		for n := r.pick(3); n > 0; n-- {
			c.Data.Tensors = append(c.Data.Tensors, r.tensor())
		}
	}
	if r.pick(4) == 0 {
		c.DeprecatedData = append(c.DeprecatedData, r.tensor())
	}
	return c
}

func (r swRand) info() *reverbpb.SampleInfo {
	info := &reverbpb.SampleInfo{Probability: r.f64(), TableSize: int64(r.u64()), RateLimited: r.pick(2) == 0}
	if r.pick(5) > 0 {
		it := &reverbpb.PrioritizedItem{Key: r.u64(), Table: r.str(), Priority: r.f64(), TimesSampled: r.i32()}
		if r.pick(3) == 0 {
			it.DeprecatedChunkKeys = []uint64{r.u64(), r.u64()}
			it.DeprecatedSequenceRange = &reverbpb.SliceRange{Offset: r.i32(), Length: r.i32()}
		}
		if r.pick(2) == 0 {
			it.InsertedAt = &timestamppb.Timestamp{Seconds: int64(r.u64()), Nanos: r.i32()}
		}
		if r.pick(4) > 0 {
			it.FlatTrajectory = &reverbpb.FlatTrajectory{}
			for n := r.pick(4); n > 0; n-- {
				col := &reverbpb.FlatTrajectory_Column{Squeeze: r.pick(2) == 0}
				for m := r.pick(3); m > 0; m-- {
					col.ChunkSlices = append(col.ChunkSlices, &reverbpb.FlatTrajectory_ChunkSlice{
						ChunkKey: r.u64(), Offset: r.i32(), Length: r.i32(), Index: r.i32(),
					})
				}
				it.FlatTrajectory.Columns = append(it.FlatTrajectory.Columns, col)
			}
		}
		info.Item = it
	}
	return info
}

func swMarshal(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unknownField returns an encoded field the decoder must skip: an unknown
// field number, or a known one with another wire type.
func (r swRand) unknownField() []byte {
	var b []byte
	num := protowire.Number([]int{1, 2, 3, 4, 5, 8, 19, 1000, int(protowire.MaxValidNumber) - 20}[r.pick(9)])
	switch r.pick(5) {
	case 0:
		b = protowire.AppendTag(b, num, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, 7)
	case 1:
		b = protowire.AppendTag(b, num, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, 7)
	case 2:
		b = protowire.AppendTag(b, num, protowire.StartGroupType)
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
		b = protowire.AppendTag(b, num, protowire.EndGroupType)
	case 3:
		b = protowire.AppendTag(b, num+20, protowire.BytesType)
		b = protowire.AppendBytes(b, []byte("xyz"))
	case 4:
		b = protowire.AppendTag(b, num+20, protowire.VarintType)
		b = protowire.AppendVarint(b, math.MaxUint64)
	}
	return b
}

// chunkBytes returns the encoding of a random ChunkData whose tensors
// sometimes repeat singular fields (the last value counts, shapes merge).
func (r swRand) chunkBytes(t testing.TB) []byte {
	c := r.chunk()
	data := c.Data
	c.Data = nil
	b := swMarshal(t, c)
	if data == nil {
		return b
	}
	var d []byte
	for _, p := range data.Tensors {
		tb := swMarshal(t, p)
		for n := r.pick(3); n > 0; n-- {
			switch r.pick(5) {
			case 0:
				tb = append(tb, swField(4, r.bytes(3))...)
			case 1:
				tb = protowire.AppendTag(tb, 1, protowire.VarintType)
				tb = protowire.AppendVarint(tb, r.u64())
			case 2:
				tb = append(tb, swField(2, swMarshal(t, r.tensor().GetTensorShape()))...)
			case 3:
				tb = append(tb, r.unknownField()...)
			case 4:
				tb = protowire.AppendTag(tb, 3, protowire.VarintType)
				tb = protowire.AppendVarint(tb, r.u64())
			}
		}
		d = append(d, swField(1, tb)...)
	}
	return append(b, swField(5, d)...)
}

// entry returns the encoding of a random SampleEntry, sometimes made of
// several encodings of the same message (so singular message fields
// repeat and merge), with unknown fields mixed in.
func (r swRand) entry(t testing.TB) []byte {
	var b []byte
	for parts := 1 + r.pick(2); parts > 0; parts-- {
		e := &reverbpb.SampleStreamResponse_SampleEntry{EndOfSequence: r.pick(2) == 0}
		if r.pick(4) > 0 {
			e.Info = r.info()
		}
		b = append(b, swMarshal(t, e)...)
		for n := r.pick(3); n > 0; n-- {
			// A chunk made of one or two ChunkData encodings.
			var c []byte
			for m := 1 + r.pick(2); m > 0; m-- {
				c = append(c, r.chunkBytes(t)...)
				if r.pick(4) == 0 {
					c = append(c, r.unknownField()...)
				}
			}
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendBytes(b, c)
		}
		if r.pick(4) == 0 {
			b = append(b, r.unknownField()...)
		}
	}
	return b
}

func (r swRand) response(t testing.TB) []byte {
	var b []byte
	for n := r.pick(5); n > 0; n-- {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, r.entry(t))
		if r.pick(5) == 0 {
			b = append(b, r.unknownField()...)
		}
	}
	return b
}

// canonicalTensor keeps the fields of a TensorProto the decoder keeps.
func canonicalTensor(t testing.TB, p *tensorflowpb.TensorProto) *tensorflowpb.TensorProto {
	out := &tensorflowpb.TensorProto{}
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(swMarshal(t, p), out); err != nil {
		t.Fatal(err)
	}
	out.VersionNumber = 0
	for _, d := range out.GetTensorShape().GetDim() {
		d.Name = ""
	}
	if out.TensorShape == nil {
		out.TensorShape = &tensorflowpb.TensorShapeProto{}
	}
	return out
}

// canonicalProto keeps the fields of a SampleStreamResponse the decoder
// keeps.
func canonicalProto(t testing.TB, resp *reverbpb.SampleStreamResponse) *reverbpb.SampleStreamResponse {
	out := &reverbpb.SampleStreamResponse{}
	for _, e := range resp.GetEntries() {
		ce := &reverbpb.SampleStreamResponse_SampleEntry{EndOfSequence: e.GetEndOfSequence()}
		if info := e.GetInfo(); info != nil {
			it := info.GetItem()
			ci := &reverbpb.PrioritizedItem{Key: it.GetKey(), Table: it.GetTable(), Priority: it.GetPriority(), TimesSampled: it.GetTimesSampled()}
			if ts := it.GetInsertedAt(); ts != nil {
				ci.InsertedAt = &timestamppb.Timestamp{Seconds: ts.GetSeconds(), Nanos: ts.GetNanos()}
			}
			ci.FlatTrajectory = &reverbpb.FlatTrajectory{}
			for _, col := range it.GetFlatTrajectory().GetColumns() {
				cc := &reverbpb.FlatTrajectory_Column{Squeeze: col.GetSqueeze()}
				for _, s := range col.GetChunkSlices() {
					cc.ChunkSlices = append(cc.ChunkSlices, &reverbpb.FlatTrajectory_ChunkSlice{ChunkKey: s.GetChunkKey(), Offset: s.GetOffset(), Length: s.GetLength(), Index: s.GetIndex()})
				}
				ci.FlatTrajectory.Columns = append(ci.FlatTrajectory.Columns, cc)
			}
			if len(ci.FlatTrajectory.Columns) == 0 {
				ci.FlatTrajectory = nil
			}
			ce.Info = &reverbpb.SampleInfo{Item: ci, Probability: info.GetProbability(), TableSize: info.GetTableSize(), RateLimited: info.GetRateLimited()}
		}
		for _, c := range e.GetData() {
			cc := &reverbpb.ChunkData{ChunkKey: c.GetChunkKey(), DeltaEncoded: c.GetDeltaEncoded(), Data: &reverbpb.ChunkData_Data{}}
			for _, p := range c.GetData().GetTensors() {
				cc.Data.Tensors = append(cc.Data.Tensors, canonicalTensor(t, p))
			}
			for _, p := range c.GetDeprecatedData() {
				cc.DeprecatedData = append(cc.DeprecatedData, canonicalTensor(t, p))
			}
			ce.Data = append(ce.Data, cc)
		}
		out.Entries = append(out.Entries, ce)
	}
	return out
}

// toProto converts decoded entries to the form canonicalProto produces.
func toProto(t testing.TB, entries []sampleEntry) *reverbpb.SampleStreamResponse {
	tensor := func(w *wireTensor) *tensorflowpb.TensorProto {
		if w.pb != nil {
			return canonicalTensor(t, w.pb)
		}
		p := &tensorflowpb.TensorProto{Dtype: w.dtype, TensorShape: &tensorflowpb.TensorShapeProto{UnknownRank: w.unknownRank}, TensorContent: w.content}
		for _, d := range w.dims {
			p.TensorShape.Dim = append(p.TensorShape.Dim, &tensorflowpb.TensorShapeProto_Dim{Size: d})
		}
		return p
	}
	out := &reverbpb.SampleStreamResponse{}
	for _, e := range entries {
		ce := &reverbpb.SampleStreamResponse_SampleEntry{EndOfSequence: e.end}
		if info := e.info; info != nil {
			it := &info.item
			ci := &reverbpb.PrioritizedItem{Key: it.key, Table: it.table, Priority: it.priority, TimesSampled: it.timesSampled}
			if it.hasInserted {
				ci.InsertedAt = &timestamppb.Timestamp{Seconds: it.seconds, Nanos: it.nanos}
			}
			if len(it.columns) > 0 {
				ci.FlatTrajectory = &reverbpb.FlatTrajectory{}
			}
			for _, col := range it.columns {
				cc := &reverbpb.FlatTrajectory_Column{Squeeze: col.squeeze}
				for _, s := range col.slices {
					cc.ChunkSlices = append(cc.ChunkSlices, &reverbpb.FlatTrajectory_ChunkSlice{ChunkKey: s.key, Offset: s.offset, Length: s.length, Index: s.index})
				}
				ci.FlatTrajectory.Columns = append(ci.FlatTrajectory.Columns, cc)
			}
			ce.Info = &reverbpb.SampleInfo{Item: ci, Probability: info.probability, TableSize: info.tableSize, RateLimited: info.rateLimited}
		}
		for i := range e.chunks {
			c := &e.chunks[i]
			cc := &reverbpb.ChunkData{ChunkKey: c.key, DeltaEncoded: c.delta, Data: &reverbpb.ChunkData_Data{}}
			for j := range c.tensors {
				cc.Data.Tensors = append(cc.Data.Tensors, tensor(&c.tensors[j]))
			}
			for j := range c.deprecated {
				cc.DeprecatedData = append(cc.DeprecatedData, tensor(&c.deprecated[j]))
			}
			ce.Data = append(ce.Data, cc)
		}
		out.Entries = append(out.Entries, ce)
	}
	return out
}

// checkSampleDecode decodes b both ways and fails unless both reject it or
// both accept it with the same result. It returns the decoder's error.
func checkSampleDecode(t *testing.T, what string, b []byte) error {
	t.Helper()
	want := &reverbpb.SampleStreamResponse{}
	werr := proto.Unmarshal(b, want)
	var got sampleResponse
	gerr := got.decode(b)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%s: proto.Unmarshal: %v; decoder: %v\nmessage %x", what, werr, gerr, b)
	}
	if werr != nil {
		return gerr
	}
	if g, w := toProto(t, got.entries), canonicalProto(t, want); !proto.Equal(g, w) {
		t.Fatalf("%s: decoded\n%v\nproto.Unmarshal\n%v", what, g, w)
	}
	return nil
}

func TestSampleResponseDecodeRandom(t *testing.T) {
	r := swRand{rand.New(rand.NewPCG(1, 2))}
	for i := 0; i < 3000; i++ {
		checkSampleDecode(t, "random message", r.response(t))
	}
}

// TestSampleResponseRecycle decodes a sequence of random messages into one
// sampleResponse, as a sampler does: after recycle(false) the slabs are
// reused and each decode must still equal proto.Unmarshal's; after
// recycle(true) the entries decoded before must be left untouched by the
// decodes that follow.
func TestSampleResponseRecycle(t *testing.T) {
	r := swRand{rand.New(rand.NewPCG(7, 8))}
	var resp sampleResponse
	type kept struct {
		entries []sampleEntry
		want    *reverbpb.SampleStreamResponse
	}
	var held []kept
	for i := 0; i < 2000; i++ {
		b := r.response(t)
		want := &reverbpb.SampleStreamResponse{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatal(err)
		}
		if err := resp.decode(b); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		w := canonicalProto(t, want)
		if g := toProto(t, resp.entries); !proto.Equal(g, w) {
			t.Fatalf("message %d: decoded\n%v\nproto.Unmarshal\n%v", i, g, w)
		}
		keep := r.pick(4) == 0
		if keep {
			held = append(held, kept{resp.entries, w})
		}
		resp.recycle(keep)
	}
	if len(held) < 100 {
		t.Fatalf("only %d responses were kept", len(held))
	}
	for i, h := range held {
		if g := toProto(t, h.entries); !proto.Equal(g, h.want) {
			t.Fatalf("kept response %d changed after later decodes:\n%v\nwant\n%v", i, g, h.want)
		}
	}
}

// TestSampleResponseDecodeCorrupt corrupts valid messages (flipped,
// inserted and deleted bytes, truncation): the decoder must accept and
// reject exactly what proto.Unmarshal accepts and rejects.
func TestSampleResponseDecodeCorrupt(t *testing.T) {
	r := swRand{rand.New(rand.NewPCG(3, 4))}
	rejected := 0
	for i := 0; i < 20000; i++ {
		b := r.response(t)
		if len(b) == 0 {
			continue
		}
		for n := 1 + r.pick(3); n > 0; n-- {
			p := r.pick(len(b))
			switch r.pick(4) {
			case 0:
				b[p] ^= byte(1 << r.pick(8))
			case 1:
				b[p] = []byte{0, 0x7f, 0x80, 0xff, 0x0a, 0x12, 0x08}[r.pick(7)]
			case 2:
				b = append(b[:p], b[p+1:]...)
			case 3:
				b = b[:p]
			}
			if len(b) == 0 {
				break
			}
		}
		if checkSampleDecode(t, "corrupt message", b) != nil {
			rejected++
		}
	}
	if rejected < 1000 {
		t.Errorf("only %d corrupt messages were rejected; the corruption is too mild to test rejection", rejected)
	}
}

func FuzzSampleResponseDecode(f *testing.F) {
	r := swRand{rand.New(rand.NewPCG(5, 6))}
	for i := 0; i < 20; i++ {
		f.Add(r.response(f))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkSampleDecode(t, "fuzzed message", b)
	})
}

// swField returns a field of number num with an encoded message as value.
func swField(num protowire.Number, msg []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

// TestSampleResponseDecodeErrors checks malformed messages that both
// decoders reject, and that the decoder's error names the field.
func TestSampleResponseDecodeErrors(t *testing.T) {
	item := func(fields ...[]byte) []byte {
		return swField(1, swField(1, swField(1, bytes.Join(fields, nil))))
	}
	tensor := func(fields ...[]byte) []byte {
		return swField(1, swField(2, swField(5, swField(1, bytes.Join(fields, nil)))))
	}
	for _, c := range []struct {
		name, msg string
		want      string // in the error
	}{
		{"table not UTF-8", string(item(swField(2, []byte("t\xff")))), "SampleStreamResponse.entries.info.item.table: string field contains invalid UTF-8"},
		{"dim name not UTF-8", string(tensor(swField(2, swField(2, swField(2, []byte{0xc0, 0x80}))))), "entries.data.data.tensors.tensor_shape.dim.name: string field contains invalid UTF-8"},
		{"field number 0", "\x00\x01", "SampleStreamResponse.(tag): invalid field number 0"},
		{"end group", string(protowire.AppendTag(nil, 7, protowire.EndGroupType)), "unexpected end group"},
		{"unterminated group", string(protowire.AppendTag(nil, 7, protowire.StartGroupType)), "(field 7)"},
		{"truncated entry", "\x0a\x05\x08", "SampleStreamResponse.entries"},
		{"truncated key", string(item([]byte{0x08, 0xff})), "entries.info.item.key"},
		{"packed keys truncated", string(item(swField(3, []byte{0x81}))), "entries.info.item.deprecated_chunk_keys"},
		{"bad typed values", string(tensor(swField(5, []byte{1, 2, 3}))), "entries.data.data.tensors"},
		{"wire type 6", "\x0e", "(field 1)"},
		{"field number too large", string(protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3)) + "\x00", "invalid field number 536870912"},
	} {
		err := checkSampleDecode(t, c.name, []byte(c.msg))
		if err == nil {
			t.Errorf("%s: accepted", c.name)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not contain %q", c.name, err, c.want)
		}
	}
}

// TestSampleCodecSplitBuffers hands the codec a message split over
// several gRPC buffers at every position.
func TestSampleCodecSplitBuffers(t *testing.T) {
	r := swRand{rand.New(rand.NewPCG(7, 8))}
	var b []byte
	for len(b) < 100 {
		b = r.response(t)
		if proto.Unmarshal(b, &reverbpb.SampleStreamResponse{}) != nil {
			b = nil
		}
	}
	var whole sampleResponse
	if err := whole.decode(b); err != nil {
		t.Fatal(err)
	}
	want := toProto(t, whole.entries)
	for i := 0; i <= len(b); i++ {
		for j := i; j <= len(b); j += 1 + len(b)/7 {
			data := mem.BufferSlice{mem.SliceBuffer(bytes.Clone(b[:i])), mem.SliceBuffer(bytes.Clone(b[i:j])), mem.SliceBuffer(bytes.Clone(b[j:]))}
			var got sampleResponse
			if err := (streamCodec{}).Unmarshal(data, &got); err != nil {
				t.Fatalf("split at %d, %d: %v", i, j, err)
			}
			// The response must not depend on the buffers it was given.
			for _, buf := range data {
				clear(buf.ReadOnlyData())
			}
			if g := toProto(t, got.entries); !proto.Equal(g, want) {
				t.Fatalf("split at %d, %d: decoded\n%v\nwant\n%v", i, j, g, want)
			}
			got.buf.Free()
		}
	}
}

func TestInsertResponseDecode(t *testing.T) {
	r := swRand{rand.New(rand.NewPCG(9, 10))}
	for i := 0; i < 5000; i++ {
		var b []byte
		for n := r.pick(4); n > 0; n-- {
			switch r.pick(3) {
			case 0:
				b = protowire.AppendTag(b, 1, protowire.VarintType)
				b = protowire.AppendVarint(b, r.u64())
			case 1:
				b = append(b, swMarshal(t, &reverbpb.InsertStreamResponse{Keys: []uint64{r.u64(), r.u64()}})...)
			case 2:
				b = append(b, r.unknownField()...)
			}
		}
		if len(b) > 0 && r.pick(2) == 0 {
			b[r.pick(len(b))] ^= byte(1 << r.pick(8))
		}
		want := &reverbpb.InsertStreamResponse{}
		werr := proto.Unmarshal(b, want)
		got := insertResponse{keys: []uint64{42}}
		gerr := got.decode(b)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("proto.Unmarshal: %v; decoder: %v\nmessage %x", werr, gerr, b)
		}
		if werr == nil && !slices.Equal(got.GetKeys(), want.GetKeys()) {
			t.Fatalf("keys %v, proto.Unmarshal %v", got.GetKeys(), want.GetKeys())
		}
	}
}

// oldDecodeSample is how the sampler built a sample from unmarshaled
// messages before it decoded responses by hand: the reference for
// partialSample.decode.
func oldDecodeSample(info *reverbpb.SampleInfo, chunks map[uint64]*reverbpb.ChunkData) (Sample, error) {
	item := info.GetItem()
	smp := Sample{Info: SampleInfo{
		Key: item.GetKey(), Table: item.GetTable(), Priority: item.GetPriority(), Probability: info.GetProbability(),
		TableSize: info.GetTableSize(), TimesSampled: item.GetTimesSampled(), RateLimited: info.GetRateLimited(),
	}}
	if ts := item.GetInsertedAt(); ts != nil {
		smp.Info.InsertedAt = ts.AsTime()
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: table %q, item %d: %s", ErrMalformedSample, item.GetTable(), item.GetKey(), fmt.Sprintf(format, args...))
	}
	cols := item.GetFlatTrajectory().GetColumns()
	if len(cols) == 0 {
		return Sample{}, bad("no trajectory columns")
	}
	decoded := make(map[uint64][]Tensor, len(chunks))
	smp.Columns = make([]Tensor, len(cols))
	for ci, col := range cols {
		slices := col.GetChunkSlices()
		if len(slices) == 0 {
			return Sample{}, bad("column %d has no chunk slices", ci)
		}
		parts := make([]Tensor, len(slices))
		whole := false
		for si, cs := range slices {
			key := cs.GetChunkKey()
			tensors, ok := decoded[key]
			if !ok {
				chunk, held := chunks[key]
				if !held {
					return Sample{}, bad("column %d references chunk %d, which the sample does not contain", ci, key)
				}
				var err error
				if tensors, err = DecodeChunk(chunk); err != nil {
					return Sample{}, bad("%v", err)
				}
				decoded[key] = tensors
			}
			idx := cs.GetIndex()
			if idx < 0 || int(idx) >= len(tensors) {
				return Sample{}, bad("column %d: chunk %d has %d tensors, slice wants index %d", ci, key, len(tensors), idx)
			}
			from, length := int64(cs.GetOffset()), int64(cs.GetLength())
			part, err := Slice(tensors[idx], from, from+length)
			if err != nil {
				return Sample{}, bad("column %d, chunk %d: %v", ci, key, err)
			}
			parts[si] = part
			whole = len(slices) == 1 && from == 0 && length == tensors[idx].Shape[0]
		}
		var t Tensor
		if whole {
			t = parts[0]
		} else {
			var err error
			if t, err = Concat(parts); err != nil {
				return Sample{}, bad("column %d: %v", ci, err)
			}
		}
		if col.GetSqueeze() {
			var err error
			if t, err = Squeeze0(t); err != nil {
				return Sample{}, bad("column %d: squeeze: %v", ci, err)
			}
		}
		smp.Columns[ci] = t
	}
	return smp, nil
}

// TestPartialSampleDecode builds random samples, valid or not (missing
// chunks, bad slices, bad tensors, squeezes of several rows, repeated
// chunk keys, typed values), and checks that the sampler's decoding gives
// the sample, or the error, that the previous decoding gave.
func TestPartialSampleDecode(t *testing.T) {
	r := swRand{rand.New(rand.NewPCG(11, 12))}
	valid := 0
	for i := 0; i < 3000; i++ {
		validOnly := i%2 == 0
		// Chunks of 1-3 rows of one or two tensors.
		var chunks []*reverbpb.ChunkData
		keys := []uint64{r.Uint64(), r.Uint64(), r.Uint64()}
		for n := 1 + r.pick(4); n > 0; n-- {
			rows := int64(1 + r.pick(3))
			var cols []Tensor
			for m := 1 + r.pick(2); m > 0; m-- {
				dt := []DType{DTFloat, DTInt32, DTString, DTUint8}[r.pick(4)]
				cols = append(cols, wireRandTensor(r.Rand, dt, []int64{rows, int64(r.pick(3))}))
			}
			c, err := EncodeChunk(keys[r.pick(len(keys))], &reverbpb.SequenceRange{}, cols, r.pick(2) == 0)
			if err != nil {
				t.Fatal(err)
			}
			switch r.pick(12) + 12*b2i(validOnly) {
			case 0:
				c.Data.Tensors[0].TensorContent = c.Data.Tensors[0].TensorContent[:len(c.Data.Tensors[0].TensorContent)/2]
			case 1:
				c.Data.Tensors[0].TensorContent = nil
				c.Data.Tensors[0].FloatVal = []float32{1, 2}
			case 2:
				c.DeprecatedData, c.Data = c.Data.Tensors, nil
			}
			chunks = append(chunks, c)
		}
		item := &reverbpb.PrioritizedItem{Key: r.u64(), Table: r.str(), Priority: r.f64(), TimesSampled: r.i32(), FlatTrajectory: &reverbpb.FlatTrajectory{}}
		if r.pick(2) == 0 {
			item.InsertedAt = &timestamppb.Timestamp{Seconds: int64(r.pick(1 << 30)), Nanos: int32(r.pick(1e9))}
		}
		for n := r.pick(4) + b2i(validOnly); n > 0 && validOnly; n-- {
			// Slices that fit: one or two of one tensor of the last chunk
			// of a key.
			var c *reverbpb.ChunkData
			for _, x := range chunks {
				if x.GetChunkKey() == chunks[r.pick(len(chunks))].GetChunkKey() {
					c = x
				}
			}
			if c == nil {
				c = chunks[len(chunks)-1]
			}
			tensors := c.GetData().GetTensors()
			idx := r.pick(len(tensors))
			rows := int32(tensors[idx].GetTensorShape().GetDim()[0].GetSize())
			col := &reverbpb.FlatTrajectory_Column{}
			for m := 1 + r.pick(2); m > 0; m-- {
				off := int32(r.pick(int(rows)))
				length := 1 + int32(r.pick(int(rows-off)))
				col.ChunkSlices = append(col.ChunkSlices, &reverbpb.FlatTrajectory_ChunkSlice{ChunkKey: c.GetChunkKey(), Offset: off, Length: length, Index: int32(idx)})
			}
			col.Squeeze = len(col.ChunkSlices) == 1 && col.ChunkSlices[0].Length == 1 && r.pick(2) == 0
			item.FlatTrajectory.Columns = append(item.FlatTrajectory.Columns, col)
		}
		for n := r.pick(4); n > 0 && !validOnly; n-- {
			col := &reverbpb.FlatTrajectory_Column{Squeeze: r.pick(3) == 0}
			for m := 1 + r.pick(2) - r.pick(2)*r.pick(2); m > 0; m-- {
				col.ChunkSlices = append(col.ChunkSlices, &reverbpb.FlatTrajectory_ChunkSlice{
					ChunkKey: keys[r.pick(len(keys))], Offset: int32(r.pick(3)) - int32(r.pick(2)*r.pick(2)),
					Length: int32(r.pick(4)), Index: int32(r.pick(3)) - int32(r.pick(2)*r.pick(2)),
				})
			}
			item.FlatTrajectory.Columns = append(item.FlatTrajectory.Columns, col)
		}
		info := &reverbpb.SampleInfo{Item: item, Probability: r.f64(), TableSize: int64(r.u64()), RateLimited: r.pick(2) == 0}

		// The response: the chunks spread over one or two entries.
		resp := &reverbpb.SampleStreamResponse{Entries: []*reverbpb.SampleStreamResponse_SampleEntry{{Info: info}}}
		byKey := map[uint64]*reverbpb.ChunkData{}
		for _, c := range chunks {
			e := resp.Entries[r.pick(len(resp.Entries))]
			if r.pick(3) == 0 {
				e = &reverbpb.SampleStreamResponse_SampleEntry{}
				resp.Entries = append(resp.Entries, e)
			}
			e.Data = append(e.Data, c)
		}
		for _, e := range resp.Entries {
			for _, c := range e.Data {
				byKey[c.GetChunkKey()] = c // the last chunk of a key counts
			}
		}
		want, werr := oldDecodeSample(info, byKey)

		var dec sampleResponse
		if err := dec.decode(swMarshal(t, resp)); err != nil {
			t.Fatal(err)
		}
		p := &partialSample{info: dec.entries[0].info}
		for j := range dec.entries {
			for k := range dec.entries[j].chunks {
				p.add(&dec.entries[j].chunks[k])
			}
		}
		got, gerr := p.decode()
		if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
			t.Fatalf("case %d: error %v, want %v", i, gerr, werr)
		}
		if werr != nil {
			if !errors.Is(gerr, ErrMalformedSample) {
				t.Fatalf("case %d: error %v is not ErrMalformedSample", i, gerr)
			}
			continue
		}
		valid++
		if !got.Info.InsertedAt.Equal(want.Info.InsertedAt) || got.Info.InsertedAt.Location() != want.Info.InsertedAt.Location() {
			t.Fatalf("case %d: inserted at %v, want %v", i, got.Info.InsertedAt, want.Info.InsertedAt)
		}
		got.Info.InsertedAt, want.Info.InsertedAt = time.Time{}, time.Time{}
		g, w := got.Info, want.Info
		if math.Float64bits(g.Priority) != math.Float64bits(w.Priority) || math.Float64bits(g.Probability) != math.Float64bits(w.Probability) {
			t.Fatalf("case %d: info %+v, want %+v", i, got.Info, want.Info)
		}
		g.Priority, w.Priority, g.Probability, w.Probability = 0, 0, 0, 0
		if g != w {
			t.Fatalf("case %d: info %+v, want %+v", i, got.Info, want.Info)
		}
		if len(got.Columns) != len(want.Columns) {
			t.Fatalf("case %d: %d columns, want %d", i, len(got.Columns), len(want.Columns))
		}
		for j := range want.Columns {
			if !got.Columns[j].Equal(want.Columns[j]) {
				t.Fatalf("case %d: column %d is %v%v, want %v%v", i, j, got.Columns[j].DType, got.Columns[j].Shape, want.Columns[j].DType, want.Columns[j].Shape)
			}
		}
	}
	t.Logf("%d of the random samples were valid", valid)
	if valid < 1000 {
		t.Errorf("only %d of the random samples were valid", valid)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// benchSampleResponse is a SampleStreamResponse as reverie's server sends
// it to "reverie bench": n one-step samples of a 400 B float32 vector.
func benchSampleResponse(b testing.TB, n int) []byte {
	r := rand.New(rand.NewPCG(9, 10))
	resp := &reverbpb.SampleStreamResponse{}
	for i := 0; i < n; i++ {
		vals := make([]float32, 100)
		for j := range vals {
			vals[j] = r.Float32()
		}
		tp, err := EncodeTensor(Tensor{DType: DTFloat, Shape: []int64{1, 100}, Data: Vector(vals).Data}, false)
		if err != nil {
			b.Fatal(err)
		}
		key := r.Uint64()
		resp.Entries = append(resp.Entries, &reverbpb.SampleStreamResponse_SampleEntry{
			Info: &reverbpb.SampleInfo{
				Item: &reverbpb.PrioritizedItem{
					Key: r.Uint64(), Table: "s5_400", Priority: 1, TimesSampled: int32(r.IntN(100)),
					InsertedAt: timestamppb.New(time.Unix(1_700_000_000, int64(r.IntN(1e9)))),
					FlatTrajectory: &reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{
						ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: key, Length: 1}},
						Squeeze:     true,
					}}},
				},
				Probability: 1e-6, TableSize: 1_000_000,
			},
			Data: []*reverbpb.ChunkData{{
				ChunkKey:       key,
				SequenceRange:  &reverbpb.SequenceRange{EpisodeId: r.Uint64(), Start: 5, End: 5},
				Data:           &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{tp}},
				DataTensorsLen: 1, DataUncompressedSize: 400,
			}},
			EndOfSequence: true,
		})
	}
	msg, err := proto.Marshal(resp)
	if err != nil {
		b.Fatal(err)
	}
	return msg
}

// decodeKept decodes msg as the sampler does, one partialSample for every
// sample in turn, and returns the samples.
func decodeKept(t testing.TB, resp *sampleResponse, p *partialSample, msg []byte) []Sample {
	t.Helper()
	if err := resp.decode(msg); err != nil {
		t.Fatal(err)
	}
	var out []Sample
	for i := range resp.entries {
		e := &resp.entries[i]
		p.info = e.info
		for j := range e.chunks {
			p.add(&e.chunks[j])
		}
		smp, err := p.decode()
		if err != nil {
			t.Fatal(err)
		}
		p.release()
		out = append(out, smp)
	}
	resp.recycle(false)
	return out
}

// TestKeptSamplesShareNothingVisible: the column lists and shapes of
// successive samples come from shared arrays (outSlab); each sample's must
// still be its own, with no spare capacity for an append to write into a
// neighbour's.
func TestKeptSamplesShareNothingVisible(t *testing.T) {
	msg := benchSampleResponse(t, 16)
	var resp sampleResponse
	p := &partialSample{}
	var kept []Sample
	for range 5 {
		kept = append(kept, decodeKept(t, &resp, p, msg)...)
	}
	for i := range kept {
		s := &kept[i]
		if len(s.Columns) != 1 || cap(s.Columns) != 1 {
			t.Fatalf("sample %d: columns len %d cap %d, want 1 and 1", i, len(s.Columns), cap(s.Columns))
		}
		if sh := s.Columns[0].Shape; len(sh) != 1 || cap(sh) != 1 || sh[0] != 100 {
			t.Fatalf("sample %d: shape %v (cap %d), want [100] with no spare capacity", i, sh, cap(sh))
		}
	}
	// Writing into each sample's parts changes that sample only.
	for i := range kept {
		kept[i].Columns[0].Shape[0] = int64(i)
		kept[i].Columns[0].DType = DType(i)
		kept[i].Columns = append(kept[i].Columns, Tensor{})
		kept[i].Columns[0].Shape = append(kept[i].Columns[0].Shape, 7)
	}
	for i := range kept {
		c := kept[i].Columns[0]
		if c.Shape[0] != int64(i) || c.DType != DType(i) || len(c.Shape) != 2 {
			t.Fatalf("sample %d: column 0 is %v%v after writes to the others, want dtype %d shape [%d 7]", i, c.DType, c.Shape, i, i)
		}
	}
	// The first 16 are the same samples as a fresh decode's.
	fresh := decodeKept(t, &sampleResponse{}, &partialSample{}, msg)
	for i, s := range fresh {
		again := decodeKept(t, &resp, p, msg)[i]
		if !s.Columns[0].Equal(again.Columns[0]) || s.Info != again.Info {
			t.Fatalf("sample %d differs between a fresh decoder and a reused one", i)
		}
	}
}

// TestSampleDecodeAllocations bounds the allocations per sample of a
// response of 16 one-column samples: the sample's data, and a share of the
// arrays its column list and shape come from. The table's name is decoded
// once, not per sample.
func TestSampleDecodeAllocations(t *testing.T) {
	msg := benchSampleResponse(t, 16)
	var resp sampleResponse
	p := &partialSample{}
	decodeKept(t, &resp, p, msg)
	allocs := testing.AllocsPerRun(50, func() { decodeKept(t, &resp, p, msg) })
	// decodeKept's own list of the samples takes a few allocations.
	if perSample := allocs / 16; perSample > 1.5 {
		t.Errorf("%.2f allocations per sample (%.0f per response of 16), want at most 1.5", perSample, allocs)
	}
}

// BenchmarkSampleResponseDecode measures decoding a response of 16 samples
// and building their Samples, per sample.
func BenchmarkSampleResponseDecode(b *testing.B) {
	const n = 16
	msg := benchSampleResponse(b, n)
	var resp sampleResponse
	b.SetBytes(int64(len(msg) / n))
	b.ReportAllocs()
	for b.Loop() {
		if err := resp.decode(msg); err != nil {
			b.Fatal(err)
		}
		p := &partialSample{}
		for i := range resp.entries {
			e := &resp.entries[i]
			p.info = e.info
			for j := range e.chunks {
				p.add(&e.chunks[j])
			}
			if _, err := p.decode(); err != nil {
				b.Fatal(err)
			}
			p.release()
		}
		resp.recycle(false)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
}
