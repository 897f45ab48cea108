package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/resource"

	"github.com/opendefensecloud/dependency-controller/internal/denial"
	"github.com/opendefensecloud/dependency-controller/internal/plugin/workspace"
)

// Exit codes, as kubectl diff's: 0 a clean answer (allowed, nothing
// references it, no cycle, nothing dangles), ExitFound an answer that is a
// refusal or found something, ExitError a failure (usage, reading,
// the server).
const (
	ExitFound = 1
	ExitError = 2
)

// errFound ends a command that printed its answer with ExitFound.
var errFound = errors.New("found")

// errUsage marks an error in the command line (exit code 2 with a hint),
// as the workspace package marks an object named wrong.
var errUsage = workspace.ErrUsage

// Main runs the plugin with args (without the program name) and returns
// its exit code.
func Main(ctx context.Context, streams genericiooptions.IOStreams, args []string) int {
	return run(ctx, streams, args, workspace.Open)
}

// openFunc opens the workspace of the kubeconfig flags (workspace.Open;
// tests pass a fake).
type openFunc func(*genericclioptions.ConfigFlags) (*workspace.Session, error)

// run runs the plugin with args, opening the workspace with open, and
// returns its exit code.
func run(ctx context.Context, streams genericiooptions.IOStreams, args []string, open openFunc) int {
	cmd := newCommand(streams, open)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errFound):
		return ExitFound
	case errors.Is(err, errUsage):
		_, _ = fmt.Fprintf(streams.ErrOut, "error: %s\nSee '%s -h' for help and examples.\n", strings.TrimPrefix(err.Error(), errUsage.Error()+": "), commandPath(cmd, args))
		return ExitError
	}
	_, _ = fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
	return ExitError
}

// commandPath is the command that args run, as users type it.
func commandPath(root *cobra.Command, args []string) string {
	if c, _, err := root.Find(args); err == nil && c != nil {
		return c.CommandPath()
	}
	return root.CommandPath()
}

// options are the flags every command shares.
type options struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	output  string
	open    openFunc
}

// NewCommand returns the command `kubectl dependencies` with its
// subcommands.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return newCommand(streams, workspace.Open)
}

func newCommand(streams genericiooptions.IOStreams, open openFunc) *cobra.Command {
	o := &options{flags: genericclioptions.NewConfigFlags(true), streams: streams, open: open}
	root := &cobra.Command{
		Use:   "kubectl-dependencies",
		Short: "Ask what the dependency-controller says before you delete",
		Long: `Ask what the dependency-controller says before you delete.

The dependency-controller refuses to delete an object while other objects of
the workspace reference it. These commands tell, without deleting anything,
whether a DELETE would be refused and by what, what references an object,
in which order a set of objects can be deleted, and which references dangle.

Exit codes: 0 for a clean answer (allowed, nothing references it, no cycle,
nothing dangles), 1 when the answer is a refusal or found something, 2 when
the command failed.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl dependencies"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml (default: a table).")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %w", errUsage, err) })
	root.AddCommand(o.whyCommand(), o.refsCommand(), o.orderCommand(), o.danglingCommand())
	return root
}

// prepare checks the output format and opens the workspace.
func (o *options) prepare() (*workspace.Session, error) {
	if err := checkOutput(o.output); err != nil {
		return nil, err
	}
	return o.open(o.flags)
}

// prepareTarget is prepare for a command about one object, named by args
// (TYPE/NAME or TYPE NAME) in the workspace's namespace.
func (o *options) prepareTarget(args []string) (*workspace.Session, workspace.Target, error) {
	ws, err := o.prepare()
	if err != nil {
		return nil, workspace.Target{}, err
	}
	t, err := workspace.Resolve(ws.Mapper, args, ws.Namespace)
	return ws, t, err
}

// print prints v as -o asks, or with human for the table format.
func (o *options) print(v any, human func() error) error {
	if o.output == outputTable {
		return human()
	}
	return printStructured(o.streams.Out, o.output, v)
}

// usageArgs wraps a cobra argument check into a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		return nil
	}
}

func (o *options) whyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "why (TYPE/NAME | TYPE NAME)",
		Short: "Would a DELETE be refused, and by what (a dry-run DELETE)",
		Long: `Ask the server what would become of a DELETE of one object, with a
server-side dry-run DELETE (dryRun=All): one request, which changes nothing.

  ALLOWED            the DELETE would be admitted now (exit 0)
  BLOCKED            dependents still reference it: every blocker with the rule
                     and field path under which it references the object, from
                     the denial's status details, and their number (exit 1)
  WOULD BE DEFERRED  blocked, and under a Replay rule a real DELETE would be
                     recorded and carried out once the dependents are gone (exit 1)
  IN FLIGHT          a reference to it is being admitted right now (409); ask
                     again after the time it says (exit 1)
  REFUSED            refused for another reason, e.g. you may not delete it (exit 1)

The dry run needs the permission to delete the object; 'kubectl dependencies
refs' answers for those who may only read.`,
		Example: `  # Can vpc-a be deleted, and if not, what references it?
  kubectl dependencies why vpc/vpc-a

  # The same for a group-qualified type in another namespace, as JSON
  kubectl dependencies why vpcs.network.test.io vpc-a -n team-a -o json`,
		Args: usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, t, err := o.prepareTarget(args)
			if err != nil {
				return err
			}
			r, err := why(cmd.Context(), ws, t)
			if err != nil {
				return err
			}
			if err := o.print(r, func() error { return printWhy(o.streams.Out, t, r) }); err != nil {
				return err
			}
			if r.Verdict != denial.Allowed {
				return errFound
			}
			return nil
		},
	}
}

func (o *options) refsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "refs (TYPE/NAME | TYPE NAME)",
		Short: "What references an object, from the reference labels of its dependents",
		Long: `List the objects that reference one object, read from the reference labels
that the dependency-controller keeps on every dependent: for each type the
workspace binds from an APIExport (and each of its own CRDs), one LIST with
the label selector of the object's reference label, across the workspace.
Reading is enough: no DELETE, no dry run.

A dependent in another namespace than the object counts only if it holds the
object's namespace (its rule reads a namespace next to the name). Dependents
that are being deleted no longer count. Where some objects of a type are not
labelled yet (the webhook labels those created before their rule), they may
reference the object unseen: refs says how many; 'kubectl dependencies why'
asks the webhook, which reads them.

Exit code 0 when nothing references the object, 1 when something does or may.`,
		Example: `  # What references vpc-a?
  kubectl dependencies refs vpc/vpc-a

  # As YAML, for a VPC in another namespace
  kubectl dependencies refs vpcs.network.test.io/vpc-a -n team-a -o yaml`,
		Args: usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, t, err := o.prepareTarget(args)
			if err != nil {
				return err
			}
			types, err := ws.Types()
			if types == nil && err != nil {
				return err
			}
			if err != nil {
				_, _ = fmt.Fprintf(o.streams.ErrOut, "Warning: %v\n", err)
			}
			r := refs(cmd.Context(), ws.Reader, t, workspace.DependentTypes(cmd.Context(), ws.Reader, types))
			if err := o.print(r, func() error { return printRefs(o.streams.Out, t, r) }); err != nil {
				return err
			}
			if !r.Clean() {
				return errFound
			}
			return nil
		},
	}
}

func (o *options) orderCommand() *cobra.Command {
	var (
		files         resource.FilenameOptions
		allNamespaces bool
	)
	cmd := &cobra.Command{
		Use:   "order (TYPE[,TYPE...] | -f FILENAME)",
		Short: "The order in which a set of objects can be deleted without a refusal",
		Long: `Print the order in which a set of objects can be deleted without a refusal:
dependents first, in waves. The objects of one wave can be deleted together
once those of the waves before it are gone or being deleted, so a script or a
GitOps prune hook deletes a whole stack in one pass without Replay rules.

The set is every object of the types in the namespace (-A: in all
namespaces), or the objects of manifests (-f: files, directories with -R,
URLs; YAML or JSON, several documents). Who references whom is read from the
reference labels of the objects as stored, not from the manifests. An object
referenced from outside the set is still refused ('kubectl dependencies refs'
tells by what).

Objects that reference each other form a cycle: every DELETE of them is
refused until one of them gets the skip-protection annotation, or their
namespace is deleted (kcp's teardown breaks cycles).

Exit code 0, or 1 if there is a cycle. -o json|yaml prints the waves.`,
		Example: `  # The deletion order of the VPCs, Subnets and VirtualMachines of the namespace
  kubectl dependencies order vpcs,subnets,virtualmachines

  # The deletion order of what a directory of manifests created, in all namespaces
  kubectl dependencies order -f manifests/ -R

  # Delete wave after wave
  kubectl dependencies order vpcs,virtualmachines -o json |
    jq -r '.waves[] | [.objects[] | .resource + "/" + .name] | join(" ")' |
    while read -r objects; do kubectl delete $objects --wait=false; done`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(files.Filenames) > 0 && len(args) > 0 {
				return fmt.Errorf("%w: order takes types or files (-f), not both", errUsage)
			}
			var typeArgs []string
			if len(files.Filenames) == 0 {
				var err error
				if typeArgs, err = splitTypes(args); err != nil {
					return err
				}
			}
			ws, err := o.prepare()
			if err != nil {
				return err
			}
			var (
				nodes   []node
				missing []workspace.Object
			)
			if len(files.Filenames) > 0 {
				nodes, missing, err = nodesOfFiles(cmd.Context(), ws, &files, ws.Namespace, ws.ExplicitNamespace)
				if err != nil {
					return err
				}
			} else if nodes, err = nodesOfTypes(cmd.Context(), ws, typeArgs, ws.Namespace, allNamespaces); err != nil {
				return err
			}
			r := plan(nodes)
			r.Missing = missing
			if err := o.print(r, func() error { return printOrder(o.streams.Out, r) }); err != nil {
				return err
			}
			if len(r.Cycles) > 0 {
				return errFound
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVarP(&files.Filenames, "filename", "f", nil, "Files, directories or URLs of the manifests of the objects.")
	cmd.Flags().BoolVarP(&files.Recursive, "recursive", "R", false, "Read the directories of -f recursively.")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "The objects of the types in all namespaces.")
	return cmd
}

func (o *options) danglingCommand() *cobra.Command {
	var allNamespaces bool
	cmd := &cobra.Command{
		Use:   "dangling",
		Short: "References to objects that do not exist, as the webhook reports them",
		Long: `List the dependents that reference objects that do not exist: the webhook
records a Warning Event with reason DanglingReference on such a dependent once
the grace period has passed (creation order is free), where the dependent's
provider claims events in its APIExport. This lists those Events in the
namespace (-A: all), the newest per dependent, newest first, and keeps those
that still hold: the dependent exists, still references the object, and the
object still does not exist.

Exit code 0 when nothing dangles, 1 otherwise.`,
		Example: `  # Dangling references in the current namespace
  kubectl dependencies dangling

  # In every namespace of the workspace, as JSON
  kubectl dependencies dangling -A -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := o.prepare()
			if err != nil {
				return err
			}
			ns := ws.Namespace
			if allNamespaces {
				ns = ""
			}
			r, err := dangling(cmd.Context(), ws, ns)
			if err != nil {
				return err
			}
			if err := o.print(r, func() error { return printDangling(o.streams.Out, r, time.Now()) }); err != nil {
				return err
			}
			if len(r.Dangling) > 0 {
				return errFound
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "In all namespaces.")
	return cmd
}
