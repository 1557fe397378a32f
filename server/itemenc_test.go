package server

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/table"
	"google.golang.org/protobuf/proto"
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

// TestTrajectoryBytes: the flat_trajectory kept from an inserted item is
// the one proto.Unmarshal decodes, or nil when proto would merge parts.
func TestTrajectoryBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		traj := randomTrajectory(r, 4, 3)
		pi := &reverbpb.PrioritizedItem{Key: uint64(i), Table: "t", Priority: 1, FlatTrajectory: traj}
		b, err := proto.Marshal(pi)
		if err != nil {
			t.Fatal(err)
		}
		got := &reverbpb.FlatTrajectory{}
		if err := proto.Unmarshal(trajectoryBytes(b), got); err != nil || !proto.Equal(got, traj) {
			t.Fatalf("item %d: kept %v (%v), want %v", i, got, err, traj)
		}
		// A second flat_trajectory merges into the first: nothing kept.
		more, _ := proto.Marshal(&reverbpb.PrioritizedItem{FlatTrajectory: randomTrajectory(r, 2, 2)})
		if kept := trajectoryBytes(append(b, more...)); kept != nil {
			t.Fatalf("item %d: kept %x from a split flat_trajectory", i, kept)
		}
	}
	if kept := trajectoryBytes(nil); kept != nil {
		t.Fatalf("kept %x from an empty item", kept)
	}
}
