package client_test

import (
	"testing"

	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/leakcheck"
)

// TestMain fails the package's tests if any goroutine outlives them. The
// servers the tests start overwrite each chunk buffer they take back for
// reuse, so that a read of a chunk's bytes after its release shows.
func TestMain(m *testing.M) {
	chunkstore.PoisonRecycled = true
	leakcheck.Main(m)
}
