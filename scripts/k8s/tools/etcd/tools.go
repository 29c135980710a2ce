//go:build tools

// Package tools pins the etcd server binary built by scripts/k8s-testenv.
package tools

import _ "go.etcd.io/etcd/server/v3"
