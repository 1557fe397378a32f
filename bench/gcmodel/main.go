// Command gcmodel is a model of what Go's collector walks in a full reverie
// table, for deciding how to lay that memory out: it builds records shaped
// like the table's (slab pages of items, one chunk record per item with
// its encoding, the chunk index) with nothing else, then times forced
// collections. It is not reverie: each variant drops or reorders one part
// to show what that part costs a collection.
//
//	gcmodel [--items 1100000] [--collections 6] [--trajectory=false]
//	    [--rows=false] [--index hash|insertion|sharded|map|none]
//
// --trajectory=false drops each item's trajectory bytes and --rows=false
// each chunk's row counts (one heap object each per item); --index sets the
// order in which the chunk index reaches the chunk records: hash (shuffled,
// as reverie's open-addressing index holds them), insertion, sharded (64
// arrays, as the chunk store's shards, each in insertion order, a chunk's
// shard picked at random), a Go map, or no index. Prints the wall time and the collector's CPU (runtime/metrics)
// per collection, and the heap's size and objects.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"time"
)

// chunk has the fields of reverie's chunkstore.Chunk that hold pointers,
// and about its size (blank fields stand for those the model leaves
// unset: the reference counts, the episode and spill ids, and the LRU
// list's links, nil in memory mode).
type chunk struct {
	key   uint64
	store *store
	buf   []byte
	size  int
	_     [2]int32
	_     uint64
	rows  []int64
	_     uint64
	_     [2]*chunk
	self  [1]*chunk
}

type store struct{ _ [64]byte }

// item has the fields of reverie's table.Item (blank: priority, times
// sampled, insertion time and sequence number).
type item struct {
	key        uint64
	_          [4]uint64
	trajectory []byte
	chunks     []*chunk
}

const pageSize = 4096

var (
	pages    [][]item
	indexMap map[uint64]*chunk
	index    []*chunk
	shards   [64][]*chunk
)

func gcCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64()
}

func main() {
	n := flag.Int("items", 1_100_000, "items (and chunks) to hold")
	collections := flag.Int("collections", 6, "forced collections to time")
	withTraj := flag.Bool("trajectory", true, "give each item its own trajectory bytes (19 B)")
	withRows := flag.Bool("rows", true, "give each chunk its own row counts")
	order := flag.String("index", "hash", "chunk index: hash, insertion, sharded, map or none")
	payload := flag.Int("payload", 430, "bytes of each chunk's encoding")
	flag.Parse()
	switch *order {
	case "hash", "insertion", "sharded", "map", "none":
	default:
		fmt.Fprintln(os.Stderr, "gcmodel: --index must be hash, insertion, sharded, map or none")
		os.Exit(2)
	}
	st := &store{}
	if *order == "map" {
		indexMap = make(map[uint64]*chunk, *n)
	}
	for i := 0; i < *n; i++ {
		if i%pageSize == 0 {
			pages = append(pages, make([]item, pageSize))
		}
		c := &chunk{key: uint64(i), store: st, buf: make([]byte, *payload), size: *payload}
		if *withRows {
			c.rows = []int64{1}
		}
		c.self[0] = c
		it := &pages[i/pageSize][i%pageSize]
		it.key = uint64(i)
		if *withTraj {
			it.trajectory = make([]byte, 19)
		}
		it.chunks = c.self[:]
		switch *order {
		case "map":
			indexMap[uint64(i)] = c
		case "hash", "insertion":
			index = append(index, c)
		case "sharded":
			sh := rand.IntN(len(shards))
			shards[sh] = append(shards[sh], c)
		}
	}
	if *order == "hash" {
		rand.Shuffle(len(index), func(i, j int) { index[i], index[j] = index[j], index[i] })
	}
	runtime.GC()
	runtime.GC()
	var wall time.Duration
	cpu0 := gcCPU()
	for range *collections {
		t := time.Now()
		runtime.GC()
		wall += time.Since(t)
	}
	cpu := (gcCPU() - cpu0) / float64(*collections)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("items %d index %s trajectory %v rows %v: %.0f ms wall and %.0f ms CPU per collection; heap %d MB, %d objects\n",
		*n, *order, *withTraj, *withRows, float64(wall.Microseconds())/1e3/float64(*collections), cpu*1e3,
		ms.HeapAlloc>>20, ms.HeapObjects)
	runtime.KeepAlive(pages)
	runtime.KeepAlive(index)
	runtime.KeepAlive(indexMap)
	runtime.KeepAlive(&shards)
}
