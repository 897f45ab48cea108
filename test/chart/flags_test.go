package chart_test

import (
	goflag "flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/opendefensecloud/dependency-controller/test/helmchart"
)

// binaryFlags returns the flags a binary defines: those its AddFlags
// methods register (cmd/<binary>/*.go, the options of its assembly in
// internal/<binary>server/*.go and the common options of
// internal/command), read from the Go code, and those command.Main adds
// (--kubeconfig and controller-runtime's zap flags), registered here the
// same way. A registration whose name is not a string literal fails the
// test, so that no flag is missed.
func binaryFlags(t *testing.T, binary string) []string {
	t.Helper()
	root := helmchart.RepoRoot()
	var files []string
	for _, dir := range []string{filepath.Join("cmd", binary), filepath.Join("internal", binary+"server")} {
		found, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil || len(found) == 0 {
			t.Fatalf("no Go files in %s (%v)", dir, err)
		}
		files = append(files, found...)
	}
	files = append(files, filepath.Join(root, "internal", "command", "options.go"))
	names := map[string]bool{}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Name.Name != "AddFlags" || fn.Body == nil || len(fn.Type.Params.List) != 1 || len(fn.Type.Params.List[0].Names) != 1 {
				continue
			}
			fs := fn.Type.Params.List[0].Names[0].Name
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); !ok || id.Name != fs {
					return true
				}
				// fs.XxxVar(&v, "name", ...) or fs.Xxx("name", ...).
				arg := 0
				if strings.HasSuffix(sel.Sel.Name, "Var") || strings.HasSuffix(sel.Sel.Name, "VarP") {
					arg = 1
				}
				if len(call.Args) <= arg {
					t.Errorf("%s: %s.%s without a name", fset.Position(call.Pos()), fs, sel.Sel.Name)
					return true
				}
				name, ok := stringLit(call.Args[arg])
				if !ok {
					t.Errorf("%s: %s.%s with a name that is not a string literal", fset.Position(call.Pos()), fs, sel.Sel.Name)
					return true
				}
				names[name] = true
				return true
			})
		}
	}
	goFlags := goflag.NewFlagSet(binary, goflag.ContinueOnError)
	config.RegisterFlags(goFlags)
	(&zap.Options{}).BindFlags(goFlags)
	goFlags.VisitAll(func(f *goflag.Flag) { names[f.Name] = true })
	if len(names) < 15 {
		t.Fatalf("only %d flags of %s found: %v", len(names), binary, slices.Sorted(maps.Keys(names)))
	}
	return slices.Sorted(maps.Keys(names))
}

// argFlags returns the names of the --name=value arguments of an
// invocation, and fails the test on any other kind of argument.
func argFlags(t *testing.T, where string, args []string) []string {
	t.Helper()
	var out []string
	for _, a := range args {
		name, _, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("%s: argument %q is not --name=value", where, a)
			continue
		}
		out = append(out, name)
	}
	return out
}

// The chart passes only flags the binaries define, so that a flag removed
// from a binary (which would make it exit at once) is removed from the chart
// too; and every flag of the binaries is passed with some values, as
// README.md promises ("All flags of both binaries are values").
func TestChartFlagsAreTheBinaries(t *testing.T) {
	defined := map[string][]string{
		helmchart.Controller: binaryFlags(t, "controller"),
		helmchart.Webhook:    binaryFlags(t, "webhook"),
	}
	for _, want := range []string{"record-keys-dir", "deferred-deletion-ttl", "relabel-interval", "shard-url", "kubeconfig", "zap-log-level"} {
		if !slices.Contains(defined[helmchart.Webhook], want) {
			t.Errorf("the reading of the webhook's flags misses --%s: %v", want, defined[helmchart.Webhook])
		}
	}

	passed := map[string]map[string]bool{helmchart.Controller: {}, helmchart.Webhook: {}}
	for i, values := range []map[string]any{
		nil,
		{
			"logging": map[string]any{"development": true},
			"webhook": map[string]any{
				"frontProxyURL": "https://kcp.example.com:6443",
				"bindAddress":   "0.0.0.0",
				"clientAuth":    map[string]any{"enabled": true, "secretName": "kcp-admission-ca", "allowedNames": []any{"kcp"}},
				"shards":        []any{map[string]any{"name": "root", "url": "https://root.kcp.example:6443"}},
			},
		},
	} {
		r := render(t, values)
		invs := map[string]helmchart.Invocation{helmchart.Controller: r.bins.Controller}
		for shard, w := range webhookInvocations(r) {
			where := helmchart.Webhook
			if shard != "" {
				where += " of shard " + shard
			}
			invs[where] = w
		}
		for where, inv := range invs {
			binary, _, _ := strings.Cut(where, " ")
			for _, name := range argFlags(t, fmt.Sprintf("values %d, %s", i, where), inv.Args) {
				if !slices.Contains(defined[binary], name) {
					t.Errorf("values %d: the chart passes --%s to the %s, which does not define it", i, name, where)
				}
				passed[binary][name] = true
			}
		}
	}
	for binary, names := range defined {
		for _, name := range names {
			if !passed[binary][name] {
				t.Errorf("no value of the chart passes --%s to the %s", name, binary)
			}
		}
	}
}
