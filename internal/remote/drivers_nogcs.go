//go:build !gcs

package remote

const gcsLinked = false
