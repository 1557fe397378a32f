package table

import (
	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"google.golang.org/protobuf/proto"
)

// EncodeTrajectory returns the encoding of traj for Item.Trajectory: empty
// when traj has no columns (which the table refuses).
func EncodeTrajectory(traj *reverbpb.FlatTrajectory) []byte {
	if len(traj.GetColumns()) == 0 {
		return nil
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(traj)
	if err != nil {
		panic(err) // a FlatTrajectory has no required fields or maps to fail on
	}
	return b
}

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
	// Trajectory is the wire encoding of the item's
	// deepmind.reverb.FlatTrajectory, which names the chunk rows of each
	// column. It is kept encoded because the server only ever sends and
	// stores it (a decoded FlatTrajectory is a dozen heap objects per item,
	// which the garbage collector scans for as long as the item lives); it
	// is never empty for an item in a table, and never modified.
	Trajectory []byte
	// Chunks holds one reference to each distinct chunk the trajectory
	// names, in order of first appearance.
	Chunks []*chunkstore.Chunk
}
