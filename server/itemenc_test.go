package server

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/table"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// randomTrajectory has up to cols columns of up to slices slices each.
func randomTrajectory(r *rand.Rand, cols, slices int) *reverbpb.FlatTrajectory {
	traj := &reverbpb.FlatTrajectory{}
	for range 1 + r.IntN(cols) {
		col := &reverbpb.FlatTrajectory_Column{Squeeze: r.IntN(2) == 0}
		for range 1 + r.IntN(slices) {
			col.ChunkSlices = append(col.ChunkSlices, &reverbpb.FlatTrajectory_ChunkSlice{
				ChunkKey: r.Uint64() >> r.IntN(64), Offset: r.Int32N(100), Length: r.Int32N(100), Index: r.Int32N(4),
			})
		}
		traj.Columns = append(traj.Columns, col)
	}
	return traj
}

// TestItemEncodingMatchesProto: appendItem and appendSampleInfo produce
// what proto.Marshal produces for the same messages, across zero and
// extreme values and item sizes that need 1, 2 and 3 length bytes.
func TestItemEncodingMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	floats := []float64{0, math.Copysign(0, -1), 1, -2.5, math.Inf(1), math.SmallestNonzeroFloat64, math.NaN()}
	times := []int64{0, 1, 999_999_999, 1_000_000_000, -1, -1_500_000_000, time.Now().UnixNano(), math.MaxInt64, math.MinInt64}
	ints := []int64{0, 1, 127, 128, -1, math.MaxInt64, math.MinInt64}
	for i := range 2000 {
		traj := randomTrajectory(r, []int{1, 8, 40, 400}[i%4], 1+i%5)
		it := table.Item{
			Key:          []uint64{0, 1, r.Uint64(), math.MaxUint64}[r.IntN(4)],
			Priority:     floats[r.IntN(len(floats))],
			TimesSampled: int32(ints[r.IntN(len(ints))]),
			InsertedAt:   times[r.IntN(len(times))],
			Trajectory:   table.EncodeTrajectory(traj),
		}
		name := []string{"", "t", "a table with a longer name"}[r.IntN(3)]
		sm := table.Sampled{Item: it, Probability: floats[r.IntN(len(floats))], TableSize: ints[r.IntN(len(ints))], RateLimited: r.IntN(2) == 0}

		pi := &reverbpb.PrioritizedItem{
			Key:            it.Key,
			Table:          name,
			Priority:       it.Priority,
			TimesSampled:   it.TimesSampled,
			InsertedAt:     timestamppb.New(time.Unix(0, it.InsertedAt)),
			FlatTrajectory: traj,
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(pi)
		if err != nil {
			t.Fatal(err)
		}
		prefix := []byte("prefix")
		if got := appendItem(bytes.Clone(prefix), name, &it); !bytes.Equal(got[len(prefix):], want) || !bytes.HasPrefix(got, prefix) {
			t.Fatalf("item %d: appendItem = %x, proto.Marshal = %x", i, got, want)
		}
		info := &reverbpb.SampleInfo{Item: pi, Probability: sm.Probability, TableSize: sm.TableSize, RateLimited: sm.RateLimited}
		want, err = proto.MarshalOptions{Deterministic: true}.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendSampleInfo(bytes.Clone(prefix), name, &sm); !bytes.Equal(got[len(prefix):], want) {
			t.Fatalf("item %d (%d bytes): appendSampleInfo = %x, proto.Marshal = %x", i, len(want), got, want)
		}
	}
}

func BenchmarkSampleInfo(b *testing.B) {
	traj := randomTrajectory(rand.New(rand.NewPCG(1, 2)), 5, 1)
	sm := table.Sampled{Item: table.Item{Key: 1 << 40, Priority: 1.5, TimesSampled: 3, InsertedAt: time.Now().UnixNano(),
		Trajectory: table.EncodeTrajectory(traj)}, Probability: 1e-6, TableSize: 1e6}
	b.Run("hand", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf = appendSampleInfo(buf[:0], "replay", &sm)
		}
	})
	b.Run("proto", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			info := &reverbpb.SampleInfo{Item: &reverbpb.PrioritizedItem{Key: sm.Item.Key, Table: "replay", Priority: sm.Item.Priority,
				TimesSampled: sm.Item.TimesSampled, InsertedAt: timestamppb.New(time.Unix(0, sm.Item.InsertedAt)), FlatTrajectory: traj},
				Probability: sm.Probability, TableSize: sm.TableSize}
			buf, _ = proto.MarshalOptions{}.MarshalAppend(buf[:0], info)
		}
	})
}

// walkTrajectory decodes the encoded FlatTrajectory b with the server's
// readers (trajectory.go).
func walkTrajectory(b []byte) *reverbpb.FlatTrajectory {
	traj := &reverbpb.FlatTrajectory{}
	for rest := b; ; {
		col, r, ok := nextMessage(rest, trajColumnsField)
		if !ok {
			break
		}
		rest = r
		squeeze, n := columnSqueeze(col)
		c := &reverbpb.FlatTrajectory_Column{Squeeze: squeeze}
		for cr := col; ; {
			sb, r, ok := nextMessage(cr, columnSlicesField)
			if !ok {
				break
			}
			cr = r
			sl := parseSlice(sb)
			c.ChunkSlices = append(c.ChunkSlices, &reverbpb.FlatTrajectory_ChunkSlice{
				ChunkKey: sl.chunkKey, Offset: sl.offset, Length: sl.length, Index: sl.index})
		}
		if len(c.ChunkSlices) != n {
			panic(fmt.Sprintf("columnSqueeze counted %d slices, nextMessage found %d", n, len(c.ChunkSlices)))
		}
		traj.Columns = append(traj.Columns, c)
	}
	return traj
}

// TestTrajectoryReaders: the readers of encoded trajectories find what
// proto.Unmarshal decodes, including for parts concatenated (as the codec
// keeps a flat_trajectory sent in several parts) and unknown fields.
func TestTrajectoryReaders(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		b, err := proto.Marshal(randomTrajectory(r, 4, 3))
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			more, _ := proto.Marshal(randomTrajectory(r, 2, 2))
			b = append(b, more...)
		}
		if i%5 == 0 {
			b = protowire.AppendVarint(protowire.AppendTag(b, 9, protowire.VarintType), 7) // unknown
		}
		want := &reverbpb.FlatTrajectory{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatal(err)
		}
		want.ProtoReflect().SetUnknown(nil)
		if got := walkTrajectory(b); !proto.Equal(got, want) {
			t.Fatalf("case %d: readers found %v, proto.Unmarshal %v", i, got, want)
		}
		var all []trajSlice
		for _, col := range want.Columns {
			for _, sl := range col.ChunkSlices {
				all = append(all, trajSlice{sl.ChunkKey, sl.Offset, sl.Length, sl.Index})
			}
		}
		if got := slices.Collect(slicesOf(b)); !slices.Equal(got, all) {
			t.Fatalf("case %d: slicesOf found %v, proto.Unmarshal %v", i, got, all)
		}
	}
}

// FuzzTrajectoryReaders: on any bytes proto.Unmarshal accepts as a
// FlatTrajectory, the readers find the same columns and slices.
func FuzzTrajectoryReaders(f *testing.F) {
	b, _ := proto.Marshal(randomTrajectory(rand.New(rand.NewPCG(5, 6)), 3, 3))
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &reverbpb.FlatTrajectory{}
		if proto.Unmarshal(b, want) != nil {
			return
		}
		discardUnknown(want.ProtoReflect())
		if got := walkTrajectory(b); !proto.Equal(got, want) {
			t.Fatalf("readers found %v, proto.Unmarshal %v", got, want)
		}
	})
}

// discardUnknown drops the unknown fields of m and its messages.
func discardUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() == protoreflect.MessageKind && fd.IsList() {
			for i := range v.List().Len() {
				discardUnknown(v.List().Get(i).Message())
			}
		}
		return true
	})
}
