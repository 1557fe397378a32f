//go:build nogcs

package remote

const gcsLinked = false
