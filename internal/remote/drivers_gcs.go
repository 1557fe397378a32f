//go:build gcs

package remote

// The gs:// driver is most of the size remote snapshots add to the binary
// (about 32 MB of 48 MB) and 20 MiB of an idle server's RSS, so it is
// opt-in: build with -tags gcs to link it.
import _ "gocloud.dev/blob/gcsblob"

const gcsLinked = true
