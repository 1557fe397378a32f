//go:build !nogcs

package remote

// The gs:// driver is most of the size remote snapshots add to the binary
// (about 32 MB of 48 MB); build with -tags nogcs to leave it out.
import _ "gocloud.dev/blob/gcsblob"

const gcsLinked = true
