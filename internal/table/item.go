package table

import (
	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
)

// Item is one entry of a table: a key, a priority, and references to the
// chunk rows that hold its data.
type Item struct {
	Key          uint64
	Priority     float64
	TimesSampled int32
	// InsertedAt is the Unix time in nanoseconds when the table first took
	// the item.
	InsertedAt int64
	// Seq orders the items of a table by insertion: the table numbers items
	// from a counter as it takes them (a priority update keeps the number).
	// Checkpoints store items in Seq order, which rebuilds FIFO and LIFO
	// order on restore.
	Seq uint64
	// Trajectory names the chunk rows of each column.
	Trajectory *reverbpb.FlatTrajectory
	// Chunks holds one reference to each distinct chunk the trajectory
	// names, in order of first appearance.
	Chunks []*chunkstore.Chunk
}
