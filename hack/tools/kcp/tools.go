//go:build tools

// Package tools records the kcp commands (and the matching kubectl) built by
// `make kcp`.
package tools

import (
	_ "github.com/kcp-dev/kcp/cmd/cache-server"
	_ "github.com/kcp-dev/kcp/cmd/kcp"
	_ "github.com/kcp-dev/kcp/cmd/kcp-front-proxy"
	_ "github.com/kcp-dev/kcp/cmd/sharded-test-server"
	_ "github.com/kcp-dev/sdk/cmd/apigen"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
