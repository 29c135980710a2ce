//go:build tools

// Package tools pins the Kubernetes binaries that scripts/k8s-testenv builds
// (kube-apiserver, kubectl, and for the test node kubelet, kube-scheduler and
// kube-controller-manager) so that `go mod tidy` keeps their module graph.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
