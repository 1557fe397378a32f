package server

import (
	"fmt"
	"testing"

	"github.com/reverie-rl/reverie/internal/chunkstore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestToStatusChunkErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("sampling item 1: %w: chunk 7: disk on fire", chunkstore.ErrRead), codes.Internal},
		{fmt.Errorf("sampling item 1: chunk 7: %w", chunkstore.ErrClosed), codes.Unavailable},
		{fmt.Errorf("sampling item 1: chunk 7: %w", chunkstore.ErrReleased), codes.Internal},
	} {
		st := status.Convert(toStatus(tc.err))
		if st.Code() != tc.want || st.Message() != tc.err.Error() {
			t.Errorf("toStatus(%q) = %v %q, want %v with the error's text", tc.err, st.Code(), st.Message(), tc.want)
		}
	}
}
