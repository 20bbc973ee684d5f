//go:build tools

// Package tools pins the KWOK controller built by .ci/build-kwok.sh so that
// `go mod tidy` keeps its dependencies in go.sum.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
