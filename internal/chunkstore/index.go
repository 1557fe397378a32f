package chunkstore

import "github.com/reverie-rl/reverie/internal/openaddr"

// index maps chunk keys to chunks. Go's map under the insert and release
// churn of a full table cost 10% of the server's CPU on 400 B inserts,
// most of it probing; see package openaddr. Not safe for concurrent use.
type index struct {
	m openaddr.Map[*Chunk]
}

func newIndex() index { return index{m: openaddr.New[*Chunk]()} }

// get returns the chunk with key, or nil.
func (ix *index) get(key uint64) *Chunk {
	c, _ := ix.m.Get(key)
	return c
}

// set maps key to c, replacing the chunk key maps to if any.
func (ix *index) set(key uint64, c *Chunk) { ix.m.Set(key, c) }

// deleteChunk removes key if it maps to c.
func (ix *index) deleteChunk(key uint64, c *Chunk) { ix.m.DeleteIf(key, c) }
