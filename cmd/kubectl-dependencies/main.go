// Command kubectl-dependencies is the kubectl plugin `kubectl dependencies`:
// it asks, before anything is deleted, whether the dependency-controller
// would refuse a DELETE and why, what references an object, in which order
// a set of objects can be deleted, and which references dangle. Put it on
// the PATH and run `kubectl dependencies --help`; see internal/plugin and
// docs/operations.md, "Asking before deleting".
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/opendefensecloud/dependency-controller/internal/plugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := plugin.Main(ctx, genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}
