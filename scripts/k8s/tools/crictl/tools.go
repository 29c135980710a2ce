//go:build tools

// Package tools pins crictl, the CRI client that scripts/k8s-testenv builds for the pure
// cgroup v2 guest's short node test (containerd + NRI + a pod made through the CRI, no
// kubelet). A module of its own: cri-tools brings its own Kubernetes client libraries.
package tools

import (
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
)
