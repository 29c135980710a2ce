//go:build tools

// Package tools pins the Kubernetes binaries that scripts/k8s-testenv builds
// (kube-apiserver, kubectl) so that `go mod tidy` keeps their module graph.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
