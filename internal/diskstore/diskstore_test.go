package diskstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/leakcheck"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func openT(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestPutGetDelete(t *testing.T) {
	s := openT(t, t.TempDir())
	for id := range uint64(100) {
		if err := s.Put(id, bytes.Repeat([]byte{byte(id)}, int(id)*100)); err != nil {
			t.Fatal(err)
		}
	}
	for id := range uint64(100) {
		b, err := s.Get(id)
		if err != nil || !bytes.Equal(b, bytes.Repeat([]byte{byte(id)}, int(id)*100)) {
			t.Fatalf("Get(%d): %d bytes, %v", id, len(b), err)
		}
	}
	if err := s.Delete([]uint64{3, 5, 7, 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(5); err == nil {
		t.Fatal("Get of a deleted id succeeded")
	}
	if n, err := s.Len(); n != 97 || err != nil {
		t.Fatalf("Len = %d, %v; want 97", n, err)
	}
}

func TestOpenWipesOnlySpillDirs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spill")
	s := openT(t, dir)
	if err := s.Put(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	// A crash leaves the directory as it is; the next start wipes what
	// the store made, and nothing else: a file someone put there, or a
	// directory (a checkpoint directory configured inside the spill's),
	// is not the store's to remove.
	if err := os.WriteFile(filepath.Join(dir, "stray"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "checkpoints", "2026-01-01T00:00:00Z"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open of an open directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "stray")); err != nil {
		t.Fatal("a refused Open wiped the directory")
	}
	s.mu.Lock()
	s.db.Close()
	s.db = nil
	s.lock.Close()
	s.mu.Unlock()
	s2 := openT(t, dir)
	if n, err := s2.Len(); n != 0 || err != nil {
		t.Fatalf("reopened spill holds %d values (%v)", n, err)
	}
	for _, name := range []string{"stray", filepath.Join("checkpoints", "2026-01-01T00:00:00Z")} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("the wipe removed %s, which the store did not make: %v", name, err)
		}
	}
	s2.Close()
	for _, name := range []string{"stray", filepath.Join("checkpoints", "2026-01-01T00:00:00Z")} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("Close removed %s, which the store did not make: %v", name, err)
		}
	}

	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "precious"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(other, Options{}); !errors.Is(err, ErrNotSpillDir) {
		t.Fatalf("Open of a foreign directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(other, "precious")); err != nil {
		t.Fatal("Open touched a foreign directory")
	}
}

func TestClosed(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	if err := s.Put(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := s.Put(2, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("Close left %v", ents)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func chunk(key uint64, n int) *reverbpb.ChunkData {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(key*31 + uint64(i))
	}
	return &reverbpb.ChunkData{
		ChunkKey:      key,
		SequenceRange: &reverbpb.SequenceRange{EpisodeId: key},
		Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{
			Dtype:         tensorflowpb.DataType_DT_UINT8,
			TensorShape:   &tensorflowpb.TensorShapeProto{Dim: []*tensorflowpb.TensorShapeProto_Dim{{Size: 1}, {Size: int64(n)}}},
			TensorContent: b,
		}}},
	}
}

// TestChunkStoreOverPebble runs a hybrid chunk store at a tenth of its data
// over pebble: everything reads back equal, and releasing every chunk
// empties the spill.
func TestChunkStoreOverPebble(t *testing.T) {
	for _, mode := range []chunkstore.Mode{chunkstore.Hybrid, chunkstore.Disk} {
		t.Run(mode.String(), func(t *testing.T) {
			sp := openT(t, t.TempDir())
			const n, size = 200, 10 << 10
			cs, err := chunkstore.NewTiered(chunkstore.Options{Mode: mode, MemoryLimit: n * size / 10, Spill: sp})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			var held []*chunkstore.Chunk
			for k := range uint64(n) {
				held = append(held, cs.Insert(chunk(k+1, size)))
			}
			if st := cs.Stats(); st.MemoryBytes > n*size/10 {
				t.Fatalf("%d bytes in memory, limit %d", st.MemoryBytes, n*size/10)
			}
			for i, c := range slices.Backward(held) {
				d, err := c.Data()
				if err != nil || !proto.Equal(d, chunk(uint64(i+1), size)) {
					t.Fatalf("chunk %d: %v", i+1, err)
				}
			}
			if st := cs.Stats(); st.ColdReads < n*8/10 {
				t.Fatalf("only %d cold reads", st.ColdReads)
			}
			for _, c := range held {
				c.Unref()
			}
			cs.Close() // flushes the deletes
			if n, err := sp.Len(); n != 0 || err != nil {
				t.Fatalf("spill holds %d values after every chunk was released (%v)", n, err)
			}
		})
	}
}

// BenchmarkColdRead reads chunks back from pebble through a hybrid chunk
// store whose memory holds none of them, so every read is cold: a pebble
// lookup and a copy, then the encoding is what a sample response sends
// (Chunk.Encoded; a caller that needs the fields decodes it on top, see
// chunkstore's BenchmarkRead). The data (64 MiB) sits in pebble's files,
// most likely in the OS page cache; a read from the device costs its
// latency on top. It reports the p50 and p99 latency of one read.
func BenchmarkColdRead(b *testing.B) {
	for _, size := range []int{400, 40 << 10, 400 << 10} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			sp := openT(b, b.TempDir())
			cs, err := chunkstore.NewTiered(chunkstore.Options{Mode: chunkstore.Hybrid, MemoryLimit: 1, Spill: sp})
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			n := max(64<<20/size, 1)
			held := make([]*chunkstore.Chunk, n)
			for k := range held {
				held[k] = cs.Insert(chunk(uint64(k+1), size))
			}
			lat := make([]time.Duration, 0, b.N)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				c := held[(i*7919)%n]
				start := time.Now()
				if _, err := c.Encoded(); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			for _, c := range held {
				c.Unref()
			}
		})
	}
}

// TestOpenAfterCrashInOpen: a crash inside Open leaves the directory half
// made. The next Open must take it back: a directory holding only the
// lock file (the crash came before the marker was written) is one it
// made, and a wipe interrupted half way keeps the marker to the end.
func TestOpenAfterCrashInOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spill")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, lockFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := openT(t, dir)
	if err := s.Put(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	// A crash: pebble's files stay, and the lock goes with the process.
	s.mu.Lock()
	s.db.Close()
	s.db = nil
	s.lock.Close()
	s.mu.Unlock()
	if err := wipeExcept(dir, "pebble"); err != nil { // the next wipe stops before pebble/
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, MarkerFile)); err != nil {
		t.Fatalf("a wipe cut short removed the marker first: %v", err)
	}
	openT(t, dir)
}
