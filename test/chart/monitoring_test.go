package chart_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opendefensecloud/dependency-controller/test/helmchart"
)

// The selectors the alerts use by default: the job and namespace that the
// chart's ServiceMonitors give the series of each binary.
const (
	webhookSelector    = `job="` + fullname + `-webhook-metrics",namespace="` + namespace + `"`
	controllerSelector = `job="` + fullname + `-controller-metrics",namespace="` + namespace + `"`
)

// allAlerts are the alerts of the PrometheusRule, in order.
var allAlerts = []string{
	"DependencyWebhookDown", "DependencyControllerDown", "DependencyRuleNotReady", "DependencySourceNotSynced",
	"DependencyDanglingReferences", "DependencyWebhookDecisionErrors", "DependencyWebhookDecisionLatencyHigh",
}

// controllerAlerts are the alerts on the controller's series; the others
// are on the webhook's.
var controllerAlerts = []string{"DependencyControllerDown", "DependencyRuleNotReady"}

// alertRule is an alerting rule of the rendered PrometheusRule.
type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// alertsOf returns the alerting rules of a rendered PrometheusRule.
func alertsOf(t *testing.T, o *unstructured.Unstructured) []alertRule {
	t.Helper()
	data, err := json.Marshal(o.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("the PrometheusRule's spec: %v", err)
	}
	var out []alertRule
	for _, g := range spec.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// The PrometheusRule and the dashboard's ConfigMap are rendered exactly when
// their toggles are on, with the values' thresholds, durations, selectors
// and labels; every alert is checked by checkAlert and validated by
// validateManifest (its structural shape).
func TestMonitoring(t *testing.T) {
	dashboardFile, err := os.ReadFile(filepath.Join(helmchart.ChartDir(), "dashboards", "dependency-controller.json"))
	if err != nil {
		t.Fatal(err)
	}
	known := knownSeries(t)
	for name, tc := range map[string]struct {
		values map[string]any
		// alerts are the alerts of the PrometheusRule; nil: none is
		// rendered.
		alerts []string
		// webhook and controller are the selectors the alerts must use;
		// empty: the defaults.
		webhook, controller string
		// dashboardNamespace is the namespace of the dashboard's ConfigMap;
		// empty: none is rendered.
		dashboardNamespace string
		// dashboardLabel is the label the sidecar selects it by.
		dashboardLabel [2]string
		// check checks more.
		check func(t *testing.T, r *rendered, alerts map[string]alertRule)
	}{
		"both off by default": {values: nil},
		"ServiceMonitors alone": {
			values: map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}},
		},
		"alerts": {
			values: map[string]any{"metrics": map[string]any{
				"serviceMonitor": map[string]any{"enabled": true},
				"prometheusRule": map[string]any{"enabled": true},
			}},
			alerts: allAlerts,
			check: func(t *testing.T, r *rendered, alerts map[string]alertRule) {
				for name, want := range map[string]struct{ forDuration, severity, threshold string }{
					"DependencyWebhookDown":                {"5m", "critical", ""},
					"DependencyControllerDown":             {"10m", "warning", ""},
					"DependencyRuleNotReady":               {"15m", "warning", ""},
					"DependencySourceNotSynced":            {"15m", "warning", ""},
					"DependencyDanglingReferences":         {"30m", "warning", "> 0"},
					"DependencyWebhookDecisionErrors":      {"10m", "warning", "> 0.05"},
					"DependencyWebhookDecisionLatencyHigh": {"10m", "warning", "> 2"},
				} {
					a := alerts[name]
					if a.For != want.forDuration || a.Labels["severity"] != want.severity || !strings.HasSuffix(a.Expr, want.threshold) {
						t.Errorf("%s: for %s, severity %s, expr %q; want the defaults %+v", name, a.For, a.Labels["severity"], a.Expr, want)
					}
				}
				// The default selectors are what the ServiceMonitors give the
				// series: the Prometheus Operator sets job to the name of the
				// Service unless the ServiceMonitor names a jobLabel.
				for _, component := range []string{"controller", "webhook"} {
					sm := r.find("ServiceMonitor", fullname+"-"+component)
					if _, ok := sm.Object["spec"].(map[string]any)["jobLabel"]; ok || r.find("Service", fullname+"-"+component+"-metrics") == nil {
						t.Errorf("the %s's series do not have job=%s-%s-metrics", component, fullname, component)
					}
				}
				// The consequence named is that of the failure policy.
				if d := alerts["DependencyWebhookDown"].Annotations["description"]; !strings.Contains(d, "kcp refuses every DELETE") {
					t.Errorf("DependencyWebhookDown under failurePolicy Fail: %s", d)
				}
			},
		},
		"dashboard": {
			values:             map[string]any{"metrics": map[string]any{"grafanaDashboard": map[string]any{"enabled": true}}},
			dashboardNamespace: namespace,
			dashboardLabel:     [2]string{"grafana_dashboard", "1"},
		},
		"both, with other values": {
			values: map[string]any{
				"controller": map[string]any{"failurePolicy": "Ignore"},
				"metrics": map[string]any{
					"prometheusRule": map[string]any{
						"enabled":            true,
						"labels":             map[string]any{"release": "prometheus"},
						"alertLabels":        map[string]any{"team": "platform"},
						"webhookSelector":    `job="kcp-dependency-webhook",cluster="eu-1"`,
						"controllerSelector": `job=~"kcp-dependency-controller.*"`,
						"runbookURL":         "https://wiki.example.com/runbooks/dependency-controller",
						"rateWindow":         "10m",
						"alerts": map[string]any{
							"controllerDown":  map[string]any{"enabled": false},
							"decisionErrors":  map[string]any{"threshold": 0.1, "for": "30m", "severity": "critical"},
							"decisionLatency": map[string]any{"threshold": 0.75},
						},
					},
					"grafanaDashboard": map[string]any{
						"enabled": true, "namespace": "monitoring", "label": "grafana.example.com/dashboard", "labelValue": "kcp",
						"labels": map[string]any{"team": "platform"}, "annotations": map[string]any{"grafana_folder": "kcp"},
					},
				},
			},
			alerts:             slices.DeleteFunc(slices.Clone(allAlerts), func(a string) bool { return a == "DependencyControllerDown" }),
			webhook:            `job="kcp-dependency-webhook",cluster="eu-1"`,
			controller:         `job=~"kcp-dependency-controller.*"`,
			dashboardNamespace: "monitoring",
			dashboardLabel:     [2]string{"grafana.example.com/dashboard", "kcp"},
			check: func(t *testing.T, r *rendered, alerts map[string]alertRule) {
				if pr := r.find("PrometheusRule", fullname); pr.GetLabels()["release"] != "prometheus" {
					t.Errorf("the PrometheusRule lacks the extra label: %v", pr.GetLabels())
				}
				for name, a := range alerts {
					if a.Labels["team"] != "platform" {
						t.Errorf("%s lacks the extra alert label: %v", name, a.Labels)
					}
					if !strings.HasPrefix(a.Annotations["runbook_url"], "https://wiki.example.com/runbooks/dependency-controller#") {
						t.Errorf("%s: runbook_url %s", name, a.Annotations["runbook_url"])
					}
				}
				errs := alerts["DependencyWebhookDecisionErrors"]
				if errs.For != "30m" || errs.Labels["severity"] != "critical" || !strings.HasSuffix(errs.Expr, "> 0.1") || !strings.Contains(errs.Expr, "[10m]") {
					t.Errorf("DependencyWebhookDecisionErrors does not follow the values: %+v", errs)
				}
				if latency := alerts["DependencyWebhookDecisionLatencyHigh"]; !strings.HasSuffix(latency.Expr, "> 0.75") || latency.For != "10m" {
					t.Errorf("DependencyWebhookDecisionLatencyHigh does not follow the values: %+v", latency)
				}
				if d := alerts["DependencyWebhookDown"].Annotations["description"]; !strings.Contains(d, "unchecked") {
					t.Errorf("DependencyWebhookDown under failurePolicy Ignore: %s", d)
				}
				cm := typed[corev1.ConfigMap](t, r, "ConfigMap", fullname+"-dashboard")
				if cm.Labels["team"] != "platform" || cm.Annotations["grafana_folder"] != "kcp" {
					t.Errorf("the dashboard's ConfigMap lacks the extra labels or annotations: %v, %v", cm.Labels, cm.Annotations)
				}
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := render(t, tc.values)
			alerts := map[string]alertRule{}
			pr := r.find("PrometheusRule", fullname)
			switch {
			case tc.alerts == nil && pr != nil:
				t.Errorf("the PrometheusRule is rendered though metrics.prometheusRule.enabled is off")
			case tc.alerts != nil && pr == nil:
				t.Fatalf("no PrometheusRule among %v", r.names())
			case tc.alerts != nil:
				webhook, controller := cmp.Or(tc.webhook, webhookSelector), cmp.Or(tc.controller, controllerSelector)
				var names []string
				for _, a := range alertsOf(t, pr) {
					names = append(names, a.Alert)
					alerts[a.Alert] = a
					sel := webhook
					if slices.Contains(controllerAlerts, a.Alert) {
						sel = controller
					}
					checkAlert(t, known, a, sel)
				}
				if !slices.Equal(names, tc.alerts) {
					t.Errorf("alerts %v, want %v", names, tc.alerts)
				}
			}

			cm := r.find("ConfigMap", fullname+"-dashboard")
			switch {
			case tc.dashboardNamespace == "" && cm != nil:
				t.Errorf("the dashboard is rendered though metrics.grafanaDashboard.enabled is off")
			case tc.dashboardNamespace != "" && cm == nil:
				t.Fatalf("no dashboard ConfigMap among %v", r.names())
			case tc.dashboardNamespace != "":
				cm := typed[corev1.ConfigMap](t, r, "ConfigMap", fullname+"-dashboard")
				if cm.Namespace != tc.dashboardNamespace || cm.Labels[tc.dashboardLabel[0]] != tc.dashboardLabel[1] {
					t.Errorf("the dashboard's ConfigMap is in %s with labels %v; want %s, labelled %v", cm.Namespace, cm.Labels, tc.dashboardNamespace, tc.dashboardLabel)
				}
				if len(cm.Data) != 1 || cm.Data["dependency-controller.json"] != strings.TrimSpace(string(dashboardFile)) {
					t.Errorf("the dashboard's ConfigMap does not hold exactly dashboards/dependency-controller.json: keys %v", slices.Sorted(maps.Keys(cm.Data)))
				}
			}
			if tc.check != nil {
				tc.check(t, r, alerts)
			}
		})
	}
}

// checkAlert checks an alerting rule: a for, a severity label, a summary, a
// description and a runbook_url that points at a section of
// docs/operations.md whose heading is the alert's name; an expression that
// is valid PromQL (checkPromQL) in which every selector has the matchers of
// selector (the webhook's or the controller's); and annotations that are
// valid alert templates naming only labels the expression returns.
func checkAlert(t *testing.T, known map[string][]string, a alertRule, selector string) {
	t.Helper()
	if a.For == "" || a.Labels["severity"] == "" || a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
		t.Errorf("%s: want a for, a severity label, a summary and a description: %+v", a.Alert, a)
	}
	url, anchor, ok := strings.Cut(a.Annotations["runbook_url"], "#")
	if !ok || !strings.HasPrefix(url, "https://") || anchor != strings.ToLower(a.Alert) {
		t.Errorf("%s: runbook_url %q is not the URL of its section", a.Alert, a.Annotations["runbook_url"])
	}
	if !slices.Contains(operationsAnchors(t), anchor) {
		t.Errorf("%s: docs/operations.md has no section #%s (its runbook)", a.Alert, anchor)
	}

	want, err := parser.ParseExpr("{" + selector + "}")
	if err != nil {
		t.Fatalf("the selector %s: %v", selector, err)
	}
	var extra []string
	for _, m := range want.(*parser.VectorSelector).LabelMatchers {
		extra = append(extra, m.Name)
	}
	expr, sels := checkPromQL(t, known, extra, a.Alert, a.Expr)
	if expr == nil {
		return
	}
	if typ := expr.Type(); typ != parser.ValueTypeVector {
		t.Errorf("%s: the expression is a %s, not a vector", a.Alert, typ)
	}
	for _, s := range sels {
		for _, m := range want.(*parser.VectorSelector).LabelMatchers {
			if !slices.ContainsFunc(s.LabelMatchers, func(o *labels.Matcher) bool { return o.String() == m.String() }) {
				t.Errorf("%s: the selector %s lacks %s", a.Alert, s, m)
			}
		}
	}

	// Prometheus expands the annotations as Go templates, with $labels and
	// $value defined; every label they name must be one the expression
	// returns.
	returned := map[string]string{}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.AggregateExpr:
			for _, g := range n.Grouping {
				returned[g] = "x"
			}
		case *parser.Call:
			if n.Func.Name == "absent" {
				for _, m := range n.Args[0].(*parser.VectorSelector).LabelMatchers {
					if m.Type == labels.MatchEqual && m.Name != "__name__" {
						returned[m.Name] = "x"
					}
				}
			}
		}
		return nil
	})
	for key, text := range a.Annotations {
		tmpl, err := template.New(key).Option("missingkey=error").Funcs(alertTemplateFuncs).
			Parse("{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}" + text)
		if err != nil {
			t.Errorf("%s: annotation %s: %v", a.Alert, key, err)
			continue
		}
		data := map[string]any{"Labels": returned, "ExternalLabels": map[string]string{}, "Value": 0.5}
		if err := tmpl.Execute(io.Discard, data); err != nil {
			t.Errorf("%s: annotation %s names a label the expression does not return (it returns %v): %v", a.Alert, key, slices.Sorted(maps.Keys(returned)), err)
		}
	}
}

// alertTemplateFuncs stand in for the functions of Prometheus' alert
// templates that the annotations use.
var alertTemplateFuncs = template.FuncMap{
	"humanize":           func(v float64) string { return fmt.Sprint(v) },
	"humanizeDuration":   func(v float64) string { return fmt.Sprint(v) },
	"humanizePercentage": func(v float64) string { return fmt.Sprint(v) },
}

// checkPromQL parses a PromQL expression and checks that every selector
// names a series the project exports (or up), with matchers only on labels
// that series has or on extra labels (those of a selector from the
// values, which may come from relabeling), and that every label an
// aggregation groups by is one of every series it aggregates. It returns
// the expression (nil if it does not parse) and its selectors.
func checkPromQL(t *testing.T, known map[string][]string, extra []string, where, expr string) (parser.Expr, []*parser.VectorSelector) {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: invalid PromQL %q: %v", where, expr, err)
		return nil, nil
	}
	selectors := func(n parser.Node) []*parser.VectorSelector {
		var out []*parser.VectorSelector
		parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
			if s, ok := n.(*parser.VectorSelector); ok {
				out = append(out, s)
			}
			return nil
		})
		return out
	}
	sels := selectors(e)
	for _, s := range sels {
		labels, ok := known[s.Name]
		if !ok {
			t.Errorf("%s: %s is not a series the project exports: %s", where, cmp.Or(s.Name, "(no metric name)"), expr)
			continue
		}
		for _, m := range s.LabelMatchers {
			if m.Name != "__name__" && !slices.Contains(labels, m.Name) && !slices.Contains(extra, m.Name) {
				t.Errorf("%s: %s has no label %s: %s", where, s.Name, m.Name, expr)
			}
		}
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		agg, ok := n.(*parser.AggregateExpr)
		if !ok {
			return nil
		}
		if agg.Without {
			t.Errorf("%s: the check does not understand without(): %s", where, expr)
		}
		for _, s := range selectors(agg.Expr) {
			for _, g := range agg.Grouping {
				if labels, ok := known[s.Name]; ok && !slices.Contains(labels, g) {
					t.Errorf("%s: groups %s by %s, which it does not have: %s", where, s.Name, g, expr)
				}
			}
		}
		return nil
	})
	return e, sels
}

// operationsAnchors returns the anchors GitHub gives the headings of
// docs/operations.md.
func operationsAnchors(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(helmchart.RepoRoot(), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	var anchors []string
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`).FindAllStringSubmatch(string(data), -1) {
		anchors = append(anchors, strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-"))
	}
	return anchors
}

// datasourceRef is a Grafana data source reference.
type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// grafanaPanel is what the tests read of a panel.
type grafanaPanel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

// grafanaDashboard is what the tests read of a dashboard.
type grafanaDashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Type       string          `json:"type"`
			Name       string          `json:"name"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

// grafanaBuiltins are the variables Grafana defines that the queries may
// use, with values for parsing.
var grafanaBuiltins = map[string]string{"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}

// The chart's dashboards parse, have distinct uids and titles, take their
// data source from a variable in every panel and target, and query only
// series the project exports, in valid PromQL.
func TestDashboards(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(helmchart.ChartDir(), "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in the chart (%v)", err)
	}
	known := knownSeries(t)
	uids, titles := map[string]string{}, map[string]string{}
	for _, file := range files {
		name := filepath.Base(file)
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var d grafanaDashboard
		if err := json.Unmarshal(data, &d); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`).MatchString(d.UID) || d.Title == "" {
			t.Errorf("%s: uid %q (1 to 40 letters, digits, _ and -) and title %q are required", name, d.UID, d.Title)
		}
		if other, dup := uids[d.UID]; dup {
			t.Errorf("%s has the uid of %s", name, other)
		}
		if other, dup := titles[d.Title]; dup {
			t.Errorf("%s has the title of %s", name, other)
		}
		uids[d.UID], titles[d.Title] = name, name

		// Variables: a Prometheus data source, and queries of label values
		// of exported series.
		replace := maps.Clone(grafanaBuiltins)
		dsVar := ""
		for _, v := range d.Templating.List {
			replace[v.Name] = "x"
			switch v.Type {
			case "datasource":
				var q string
				if err := json.Unmarshal(v.Query, &q); err != nil || q != "prometheus" {
					t.Errorf("%s: the data source variable %s is not of Prometheus data sources: %s", name, v.Name, v.Query)
				}
				dsVar = v.Name
			case "query":
				var q struct {
					Query string `json:"query"`
				}
				if err := json.Unmarshal(v.Query, &q); err != nil {
					t.Errorf("%s: variable %s: %v", name, v.Name, err)
				}
				m := regexp.MustCompile(`^label_values\((.+), *([a-zA-Z_][a-zA-Z0-9_]*)\)$`).FindStringSubmatch(q.Query)
				if m == nil {
					t.Errorf("%s: variable %s: want label_values(<selector>, <label>), got %q", name, v.Name, q.Query)
					continue
				}
				where := name + " variable " + v.Name
				_, sels := checkPromQL(t, known, nil, where, grafanaExpr(t, where, m[1], replace))
				for _, s := range sels {
					if labels, ok := known[s.Name]; ok && !slices.Contains(labels, m[2]) {
						t.Errorf("%s: %s has no label %s", where, s.Name, m[2])
					}
				}
				if v.Datasource == nil || !isVariable(v.Datasource.UID, dsVar) {
					t.Errorf("%s: variable %s does not query the data source variable: %+v", name, v.Name, v.Datasource)
				}
			}
		}
		if dsVar == "" {
			t.Errorf("%s: no data source variable", name)
		}

		var panels []grafanaPanel
		var flatten func([]grafanaPanel)
		flatten = func(ps []grafanaPanel) {
			for _, p := range ps {
				panels = append(panels, p)
				flatten(p.Panels)
			}
		}
		flatten(d.Panels)
		if len(panels) < 10 {
			t.Errorf("%s: only %d panels", name, len(panels))
		}
		ids, panelTitles := map[int]bool{}, map[string]bool{}
		covered := map[[2]int]string{}
		var queried []string
		for _, p := range panels {
			where := fmt.Sprintf("%s: panel %d %q", name, p.ID, p.Title)
			if p.ID <= 0 || ids[p.ID] || p.Title == "" || panelTitles[p.Title] {
				t.Errorf("%s: ids must be positive and unique, titles set and unique", where)
			}
			ids[p.ID], panelTitles[p.Title] = true, true
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || !isVariable(p.Datasource.UID, dsVar) {
				t.Errorf("%s: its data source is not the variable $%s: %+v", where, dsVar, p.Datasource)
			}
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("%s: gridPos %+v is not within the 24 columns", where, g)
			}
			for x := g.X; x < g.X+g.W; x++ {
				for y := g.Y; y < g.Y+g.H; y++ {
					if other, ok := covered[[2]int{x, y}]; ok {
						t.Errorf("%s overlaps %s", where, other)
						x, y = g.X+g.W, g.Y+g.H
					}
					covered[[2]int{x, y}] = p.Title
				}
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no queries", where)
			}
			refIDs := map[string]bool{}
			for _, q := range p.Targets {
				if q.RefID == "" || refIDs[q.RefID] {
					t.Errorf("%s: refIds must be set and unique", where)
				}
				refIDs[q.RefID] = true
				if q.Datasource == nil || !isVariable(q.Datasource.UID, dsVar) {
					t.Errorf("%s: query %s does not use the data source variable: %+v", where, q.RefID, q.Datasource)
				}
				_, sels := checkPromQL(t, known, nil, where, grafanaExpr(t, where, q.Expr, replace))
				for _, s := range sels {
					queried = append(queried, s.Name)
				}
			}
		}
		// What the dashboard is for.
		for _, m := range []string{
			"dependency_webhook_decisions_total", "dependency_webhook_decision_duration_seconds_bucket",
			"dependency_webhook_source_indexed_dependents", "dependency_webhook_read_retries_total",
			"dependency_webhook_deletions_deferred_total", "dependency_webhook_deletions_replayed_total",
			"dependency_webhook_records_removed_total", "dependency_webhook_record_writes_total",
			"dependency_webhook_labels_total", "dependency_webhook_teardown_cycles_broken_total",
			"dependency_webhook_dangling_references", "dependency_webhook_source_watched_targets",
		} {
			if !slices.Contains(queried, m) {
				t.Errorf("%s: no panel shows %s", name, m)
			}
		}
	}
}

// isVariable reports whether a data source uid is the variable name.
func isVariable(uid, name string) bool {
	return name != "" && (uid == "$"+name || uid == "${"+name+"}")
}

// grafanaVariable is a variable in a query: $name or ${name}.
var grafanaVariable = regexp.MustCompile(`\$(?:\{(\w+)\}|(\w+))`)

// grafanaExpr replaces the variables in a query of a dashboard with values
// (by name, without the $), and fails the test on a variable it has no
// value for.
func grafanaExpr(t *testing.T, where, expr string, values map[string]string) string {
	t.Helper()
	return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		m := grafanaVariable.FindStringSubmatch(v)
		value, ok := values[m[1]+m[2]]
		if !ok {
			t.Errorf("%s: %s is not a variable of the dashboard: %s", where, v, expr)
		}
		return value
	})
}
