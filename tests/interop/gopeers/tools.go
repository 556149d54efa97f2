//go:build tools

// Package peers pins the real Gazette binaries that the interop tests and the bench run beside
// gazette-py. `make peers` builds them from the Go module proxy into build/peers/bin; nothing of
// Gazette's source is kept in this repository.
package peers

import (
	_ "go.gazette.dev/core/cmd/gazctl"
	_ "go.gazette.dev/core/cmd/gazette"
)
