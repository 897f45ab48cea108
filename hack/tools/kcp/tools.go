//go:build tools

// Package tools records the kcp commands built by `make kcp`.
package tools

import (
	_ "github.com/kcp-dev/kcp/cmd/cache-server"
	_ "github.com/kcp-dev/kcp/cmd/kcp"
	_ "github.com/kcp-dev/kcp/cmd/kcp-front-proxy"
	_ "github.com/kcp-dev/kcp/cmd/sharded-test-server"
	_ "github.com/kcp-dev/sdk/cmd/apigen"
)
