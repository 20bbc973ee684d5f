//go:build tools

// Package tools pins the command built by .ci/build-kubectl-e2e.sh so that `go mod tidy` keeps its dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubectl"
)
