package chart_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opendefensecloud/dependency-controller/test/helmchart"
)

// exportedMetric is a metric the binaries export, as their Go code declares
// it.
type exportedMetric struct {
	// typ is counter, gauge, histogram or summary; "" for a
	// prometheus.NewDesc, whose type its const metrics set.
	typ string
	// labels are its variable labels.
	labels []string
}

// series returns the names of the series the metric has in Prometheus.
func (m exportedMetric) series(name string) []string {
	switch m.typ {
	case "histogram":
		return []string{name + "_bucket", name + "_sum", name + "_count"}
	case "summary":
		return []string{name, name + "_sum", name + "_count"}
	default:
		return []string{name}
	}
}

// seriesLabels returns the labels a series of the metric can have besides
// the target labels: its variable labels, and le of a histogram's buckets or
// quantile of a summary.
func (m exportedMetric) seriesLabels(series string) []string {
	switch {
	case m.typ == "histogram" && strings.HasSuffix(series, "_bucket"):
		return append(slices.Clone(m.labels), "le")
	case m.typ == "summary" && !strings.HasSuffix(series, "_sum") && !strings.HasSuffix(series, "_count"):
		return append(slices.Clone(m.labels), "quantile")
	}
	return m.labels
}

// promOpts are the option structs of client_golang's constructors, and the
// metric types they declare.
var promOpts = map[string]string{"CounterOpts": "counter", "GaugeOpts": "gauge", "HistogramOpts": "histogram", "SummaryOpts": "summary"}

// vecConstructors take the labels as their second argument.
var vecConstructors = []string{"NewCounterVec", "NewGaugeVec", "NewHistogramVec", "NewSummaryVec"}

// exportedMetrics reads the metrics the binaries export from the Go code
// (every non-test file under cmd/ and internal/): the Name of every
// prometheus.*Opts literal passed to a client_golang constructor, with the
// labels of a *Vec, and the name and labels of every prometheus.NewDesc.
// Anything it cannot read as literals (a name built at run time, Opts
// passed by variable, Namespace or Subsystem) fails the test, so that no
// metric is missed.
func exportedMetrics(t *testing.T) map[string]exportedMetric {
	t.Helper()
	root := helmchart.RepoRoot()
	metrics := map[string]exportedMetric{}
	var problems []string
	for _, dir := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			pkg := ""
			for _, imp := range f.Imports {
				if imp.Path.Value == strconv.Quote("github.com/prometheus/client_golang/prometheus") {
					pkg = "prometheus"
					if imp.Name != nil {
						pkg = imp.Name.Name
					}
				}
			}
			if pkg == "" {
				return nil
			}
			rel, _ := filepath.Rel(root, path)
			bad := func(n ast.Node, format string, args ...any) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s", rel, fset.Position(n.Pos()).Line, fmt.Sprintf(format, args...)))
			}
			add := func(n ast.Node, name, typ string, labels []string) {
				if _, dup := metrics[name]; dup {
					bad(n, "metric %s declared twice", name)
				}
				metrics[name] = exportedMetric{typ: typ, labels: labels}
			}
			// promSel returns the name X of a selector prometheus.X.
			promSel := func(e ast.Expr) string {
				if sel, ok := e.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == pkg {
						return sel.Sel.Name
					}
				}
				return ""
			}
			handled := map[ast.Node]bool{}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				fn := promSel(call.Fun)
				switch {
				case fn == "NewDesc":
					name, ok := stringLit(call.Args[0])
					if !ok {
						bad(call, "prometheus.NewDesc with a name that is not a string literal")
						return true
					}
					labels, ok := stringSlice(call.Args[2])
					if !ok {
						bad(call, "prometheus.NewDesc(%q) with labels that are not a []string literal", name)
					}
					add(call, name, "", labels)
				case strings.HasPrefix(fn, "New") && len(call.Args) > 0:
					lit, ok := call.Args[0].(*ast.CompositeLit)
					if !ok {
						return true
					}
					typ, ok := promOpts[promSel(lit.Type)]
					if !ok {
						return true
					}
					handled[lit] = true
					name, ok := optsName(lit)
					if !ok {
						bad(lit, "prometheus.%s without a literal Name, or with Namespace or Subsystem", promSel(lit.Type))
						return true
					}
					var labels []string
					if slices.Contains(vecConstructors, fn) {
						if labels, ok = stringSlice(call.Args[1]); !ok {
							bad(call, "prometheus.%s(%q) with labels that are not a []string literal", fn, name)
						}
					}
					add(call, name, typ, labels)
				}
				return true
			})
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.CompositeLit); ok && !handled[lit] {
					if _, ok := promOpts[promSel(lit.Type)]; ok {
						bad(lit, "prometheus.%s not passed directly to a constructor", promSel(lit.Type))
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range problems {
		t.Errorf("reading the exported metrics: %s", p)
	}
	return metrics
}

// stringLit returns the value of a string literal.
func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// stringSlice returns the values of a []string literal of string literals;
// nil is an empty slice.
func stringSlice(e ast.Expr) ([]string, bool) {
	if id, ok := e.(*ast.Ident); ok && id.Name == "nil" {
		return nil, true
	}
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil, false
	}
	if arr, ok := lit.Type.(*ast.ArrayType); !ok || arr.Len != nil {
		return nil, false
	}
	out := make([]string, 0, len(lit.Elts))
	for _, el := range lit.Elts {
		s, ok := stringLit(el)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// optsName returns the Name of a prometheus.*Opts literal; false if it is
// not a string literal or the literal sets Namespace or Subsystem.
func optsName(lit *ast.CompositeLit) (string, bool) {
	name, found := "", false
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			return "", false
		}
		key, ok := kv.Key.(*ast.Ident)
		if !ok {
			return "", false
		}
		switch key.Name {
		case "Namespace", "Subsystem":
			return "", false
		case "Name":
			name, found = stringLit(kv.Value)
		}
	}
	return name, found && name != ""
}

// targetLabels are the labels Prometheus gives every series of a target
// that a ServiceMonitor discovers.
var targetLabels = []string{"job", "namespace", "instance", "pod", "service", "endpoint", "container"}

// standardMetrics are the series that Prometheus itself records per target,
// which the alerts and the dashboard may use besides the project's.
var standardMetrics = map[string]exportedMetric{"up": {typ: "gauge"}}

// knownSeries maps every series name the alerts and the dashboard may use
// to the labels it can have.
func knownSeries(t *testing.T) map[string][]string {
	t.Helper()
	metrics := exportedMetrics(t)
	// The reading is not vacuous: it finds metrics of both binaries, of
	// each way of declaring them, with their types and labels.
	for name, want := range map[string]exportedMetric{
		"dependency_webhook_decisions_total":           {typ: "counter", labels: []string{"outcome", "via"}},
		"dependency_webhook_decision_duration_seconds": {typ: "histogram", labels: []string{"outcome"}},
		"dependency_webhook_rules":                     {typ: "gauge"},
		"dependency_webhook_source_phase":              {labels: []string{"export", "resource", "version", "phase"}},
		"dependency_controller_rule_ready":             {labels: []string{"logical_cluster", "rule"}},
	} {
		if got, ok := metrics[name]; !ok || got.typ != want.typ || !slices.Equal(got.labels, want.labels) {
			t.Errorf("the Go code declares %s as %+v (found %v), want %+v", name, got, ok, want)
		}
	}
	if len(metrics) < 10 {
		t.Errorf("only %d metrics found in the Go code: %v", len(metrics), metrics)
	}
	known := map[string][]string{}
	for _, set := range []map[string]exportedMetric{metrics, standardMetrics} {
		for name, m := range set {
			for _, s := range m.series(name) {
				known[s] = append(m.seriesLabels(s), targetLabels...)
			}
		}
	}
	return known
}
