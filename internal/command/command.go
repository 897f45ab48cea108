// Package command holds what the project's binaries share around their
// run function: the options and flags both have (CommonOptions), the
// --kubeconfig and logging flags, option validation, logging setup, signal
// handling and exit codes.
package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Options are a binary's command line options.
type Options interface {
	// AddFlags registers the options as flags, with their current values
	// as defaults.
	AddFlags(fs *pflag.FlagSet)
	// Validate reports every invalid option, naming the flag.
	Validate() error
	// Build assembles the binary with the credentials of cfg, once the
	// options are valid; Main starts what it returns.
	Build(ctx context.Context, cfg *rest.Config) (manager.Runnable, error)
}

// Main parses the command line into opts, sets up logging, loads the
// kubeconfig (--kubeconfig, $KUBECONFIG, in-cluster or ~/.kube/config),
// builds the binary and runs it until SIGINT or SIGTERM. It exits with 2
// for invalid options and 1 if building or running fails, printing the
// error.
func Main(name string, opts Options) {
	fs := pflag.NewFlagSet(name, pflag.ExitOnError)
	opts.AddFlags(fs)
	goFlags := flag.NewFlagSet(name, flag.ExitOnError)
	config.RegisterFlags(goFlags)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(goFlags)
	fs.AddGoFlagSet(goFlags)
	_ = fs.Parse(os.Args[1:])

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := opts.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "Error: invalid options:\n%v\n", err)
		os.Exit(2)
	}
	cfg, err := config.GetConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: failed to load kubeconfig: %v\n", err)
		os.Exit(1)
	}
	if err := run(ctrl.SetupSignalHandler(), name, opts, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}

// run builds the binary and runs it until ctx is done.
func run(ctx context.Context, name string, opts Options, cfg *rest.Config) error {
	r, err := opts.Build(ctx, cfg)
	if err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("Starting " + name)
	if err := r.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s stopped: %w", name, err)
	}
	return nil
}
