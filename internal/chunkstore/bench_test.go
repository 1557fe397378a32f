package chunkstore

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
)

// payloadChunk is a chunk of one tensor of n bytes, like a client's. Keys
// 1 to 127 give chunks of one size.
func payloadChunk(key uint64, n int) *reverbpb.ChunkData {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(key) + byte(i)
	}
	return &reverbpb.ChunkData{
		ChunkKey:      key,
		SequenceRange: &reverbpb.SequenceRange{EpisodeId: key%7 + 1},
		Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{
			Dtype:         tensorflowpb.DataType_DT_UINT8,
			TensorShape:   &tensorflowpb.TensorShapeProto{Dim: []*tensorflowpb.TensorShapeProto_Dim{{Size: 1}, {Size: int64(n)}}},
			TensorContent: b,
		}}},
	}
}

// BenchmarkMemoryInsertRelease is the insert path of memory mode: insert a
// chunk, read its metadata as insert validation does, drop it.
func BenchmarkMemoryInsertRelease(b *testing.B) {
	for _, size := range []int{400, 40 << 10} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			s := New()
			data := payloadChunk(1, size)
			b.SetBytes(int64(size))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c := s.Insert(data)
					_, _ = c.Rows(0)
					c.Unref()
				}
			})
		})
	}
}

// BenchmarkRead reads a chunk from several goroutines at once, in memory
// mode and in a hybrid store whose data is in memory (a hot read), in the
// two ways there are: op=encoded takes the stored encoding (Chunk.Encoded),
// as sample responses do; op=decode decodes it into a message (Chunk.Data),
// for callers that need the fields. Cold reads are measured against pebble
// in internal/diskstore.
func BenchmarkRead(b *testing.B) {
	for _, size := range []int{400, 40 << 10, 400 << 10} {
		for _, mode := range []string{"memory", "hybrid"} {
			for _, op := range []string{"encoded", "decode"} {
				b.Run(fmt.Sprintf("mode=%s/size=%d/op=%s", mode, size, op), func(b *testing.B) {
					s := New()
					if mode == "hybrid" {
						s = newTiered(b, Hybrid, 1<<30, NewMemSpill())
					}
					c := s.Insert(payloadChunk(1, size))
					defer c.Unref()
					read := func() error { _, err := c.Encoded(); return err }
					if op == "decode" {
						read = func() error { _, err := c.Data(); return err }
					}
					b.SetBytes(int64(size))
					b.ReportAllocs()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := read(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		}
	}
}

// BenchmarkCollectFullStore measures a garbage collection of a store
// holding a full replay table's chunks: 1M chunks of 430 bytes, held in
// insertion order as a table's items hold them, after half of them were
// replaced FIFO. What the collector must walk is the chunks, reached once
// from the holders and once from the store's index
// (docs/benchmarks-notes.md, "The chunk index and the collector").
// It reports the collector's CPU per collection (gc-cpu-ms/op).
//
//	go test -run XXX -bench CollectFullStore -benchtime 5x ./internal/chunkstore
func BenchmarkCollectFullStore(b *testing.B) {
	const n = 1 << 20
	s := New()
	enc := make([]byte, 430)
	m := Meta{Rows: []int64{1}}
	held := make([]*Chunk, 0, n)
	key := uint64(0)
	insert := func() *Chunk {
		key++
		m.Key = key
		return s.InsertEncoded(m, append([]byte(nil), enc...))
	}
	for range n {
		held = append(held, insert())
	}
	for i := range n / 2 { // FIFO: the oldest half gives way
		held[i].Unref()
		held[i] = nil
		held = append(held, insert())
	}
	held = held[n/2:]
	runtime.GC()
	gcCPU := func() float64 {
		s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
		metrics.Read(s)
		return s[0].Value.Float64()
	}
	b.ResetTimer()
	before := gcCPU()
	for b.Loop() {
		runtime.GC()
	}
	b.ReportMetric((gcCPU()-before)*1e3/float64(b.N), "gc-cpu-ms/op")
	runtime.KeepAlive(held)
}
