package client

import (
	"github.com/reverie-rl/reverie/api/reverbpb"
	"google.golang.org/protobuf/proto"
)

func init() {
	// Tests catch any use of a pooled buffer after it was freed.
	wirePool.Poison = true
}

// InsertRequestProto returns, as an InsertStreamRequest, a message that a
// writer passes to SendMsg on an insert stream (the writer sends its own
// pre-encoded type), so that tests can record what the writer sends. It
// reports false for other messages.
func InsertRequestProto(m any) (*reverbpb.InsertStreamRequest, bool) {
	switch r := m.(type) {
	case *reverbpb.InsertStreamRequest:
		return r, true
	case *insertRequest:
		out := &reverbpb.InsertStreamRequest{}
		if err := proto.Unmarshal(r.appendTo(nil), out); err != nil {
			panic(err)
		}
		return out, true
	}
	return nil, false
}
