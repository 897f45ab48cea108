//go:build tools

// Package tools pins Helm, which `make helm` builds into bin/ for packaging
// the chart in deploy/charts and for the chart tests in test/chart.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
