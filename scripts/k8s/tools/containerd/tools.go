//go:build tools

// Package tools pins containerd 2.x for the test node of scripts/k8s-testenv: the daemon,
// its runc shim and ctr (image import). A module of its own, so that containerd's
// dependency versions do not leak into the Kubernetes graph (MVS would raise shared ones).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
