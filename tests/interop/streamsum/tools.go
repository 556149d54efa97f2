//go:build tools

// Package tools pins the Gazette packages `make peers` builds from this module: the stream-sum
// example's summer consumer (a main package of go.gazette.dev/core, built as stream-sum-summer).
package tools

import _ "go.gazette.dev/core/examples/stream-sum/summer"
