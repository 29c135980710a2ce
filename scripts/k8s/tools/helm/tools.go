//go:build tools

// Package tools pins the helm CLI built by scripts/k8s-testenv.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
