// Package chunkstore holds the chunks that table items reference.
//
// A chunk is a block of compressed, client-encoded episode steps. The store
// never looks inside the tensors: it keeps each chunk as the ChunkData
// encoding it arrived in (Chunk.Encoded), plus the metadata that insert
// validation and the tables need (key, episode, row count of each tensor,
// size), read once at insert (ParseMeta). Samples, checkpoints and the
// write-ahead log pass the encoding on as it is; Chunk.Data decodes it for
// the rare caller that needs the fields. Chunks are reference-counted. An
// insert stream holds one reference to each chunk it keeps for its writer,
// every item holds one reference to each chunk it names, and the chunk
// leaves the store when the last reference is dropped. Chunks with the same
// key are shared across streams, items and tables.
//
// # Tiers
//
// A store made by New keeps every chunk's encoding in memory (memory mode).
// In a store made by NewTiered the metadata stays in memory for the chunk's
// life, and the encoding lives in memory while it is among the most
// recently used chunks that fit in the memory limit, and otherwise in a
// Spill (a pebble database in the server).
//
// In hybrid mode the least recently used data is written to the spill when
// the data in memory passes the limit, by the goroutine whose insert or
// cold read pushed it over, outside the store's lock; a read of spilled
// data loads it back into memory. In disk mode every chunk is written to
// the spill at insert and memory only caches recently used data, so a cold
// read costs a spill read.
//
// Reads can fail in the tiered modes: Chunk.Encoded and Chunk.Data return
// an error wrapping ErrRead or ErrClosed. A chunk's spilled data is deleted
// (in batches, by a goroutine Close stops) when its last reference is
// dropped. Because the
// data of a released chunk is gone, code that reads a chunk its caller does
// not own a reference to must Pin it while it is still referenced (tables
// pin the chunks of sampled items and of items a snapshot still shows).
//
// # Reused buffers
//
// In memory mode the store reuses the buffers of released chunks of 32 KiB
// or more for new chunks of the same size class (AllocChunk, InsertOwned;
// see recycle.go), instead of leaving them to the collector. Such a chunk's
// bytes are overwritten once it is released and unpinned, so its readers
// pin it as readers of tiered chunks do (NeedsPin reports it).
//
// Store and Chunk are safe for concurrent use.
package chunkstore
