package chart_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/opendefensecloud/dependency-controller/test/helmchart"
)

// values.schema.json rejects wrong values before anything is rendered, and
// the templates reject inconsistent ones, both with a message naming the
// value. `helm lint` checks the schema too, but only logs what the templates'
// `required` and `fail` say (Helm's lint mode), so only `helm template` is
// checked for those.
func TestBadValuesAreRejected(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		// want is a substring of the error.
		want string
		// byTemplate is set for the checks of the templates.
		byTemplate bool
	}{
		"failurePolicy not in the enum": {
			map[string]any{"controller": map[string]any{"failurePolicy": "Maybe"}},
			"/controller/failurePolicy", false,
		},
		"unknown TLS mode": {
			map[string]any{"tls": map[string]any{"mode": "vault"}},
			"/tls/mode", false,
		},
		"misspelled value": {
			map[string]any{"controller": map[string]any{"replicaCount": 3}},
			"replicaCount", false,
		},
		"timeout out of range": {
			map[string]any{"controller": map[string]any{"webhookTimeoutSeconds": 31}},
			"/controller/webhookTimeoutSeconds", false,
		},
		"port as a string": {
			map[string]any{"webhook": map[string]any{"port": "9443"}},
			"/webhook/port", false,
		},
		"not a duration": {
			map[string]any{"webhook": map[string]any{"requestTimeout": "4 seconds"}},
			"/webhook/requestTimeout", false,
		},
		"log level": {
			map[string]any{"logging": map[string]any{"level": "verbose"}},
			"/logging/level", false,
		},
		"issuerRef without a name": {
			map[string]any{"tls": map[string]any{"certManager": map[string]any{"issuerRef": map[string]any{"kind": "ClusterIssuer"}}}},
			"/tls/certManager/issuerRef", false,
		},
		"secret mode without a Secret": {
			map[string]any{"tls": map[string]any{"mode": "secret"}},
			"tls.secret.name is required", true,
		},
		"client authentication without a CA": {
			map[string]any{"webhook": map[string]any{"clientAuth": map[string]any{"enabled": true}}},
			"webhook.clientAuth.enabled needs", true,
		},
		"client CA from a Secret and a ConfigMap": {
			map[string]any{"webhook": map[string]any{"clientAuth": map[string]any{"enabled": true, "secretName": "a", "configMapName": "b"}}},
			"set only one of", true,
		},
		"a NetworkPolicy that admits any source": {
			map[string]any{"webhook": map[string]any{"networkPolicy": map[string]any{"enabled": true}}},
			"webhook.networkPolicy.from must name the peers", true,
		},
		"allowed names without client authentication": {
			map[string]any{"webhook": map[string]any{"clientAuth": map[string]any{"allowedNames": []any{"kcp"}}}},
			"allowedNames needs", true,
		},
		"a value of the removed marks": {
			map[string]any{"webhook": map[string]any{"unreferencedAfter": "2m"}},
			"unreferencedAfter", false,
		},
		"a TTL that is not a duration": {
			map[string]any{"webhook": map[string]any{"deferredDeletionTTL": "1 day"}},
			"/webhook/deferredDeletionTTL", false,
		},
		"a misspelled record keys value": {
			map[string]any{"webhook": map[string]any{"recordKeys": map[string]any{"secretName": "keys"}}},
			"secretName", false,
		},
		"record keys from a Secret that is not a name": {
			map[string]any{"webhook": map[string]any{"recordKeys": map[string]any{"existingSecret": "Record Keys"}}},
			"/webhook/recordKeys/existingSecret", false,
		},
		"a Secret of record keys while they are off": {
			map[string]any{"webhook": map[string]any{"recordKeys": map[string]any{"enabled": false, "existingSecret": "keys"}}},
			"webhook.recordKeys.existingSecret needs webhook.recordKeys.enabled", true,
		},
		"ServiceMonitor without metrics": {
			map[string]any{"metrics": map[string]any{"enabled": false, "serviceMonitor": map[string]any{"enabled": true}}},
			"metrics.serviceMonitor.enabled needs", true,
		},
		"alerts without metrics": {
			map[string]any{"metrics": map[string]any{"enabled": false, "prometheusRule": map[string]any{"enabled": true}}},
			"metrics.prometheusRule.enabled needs metrics.enabled", true,
		},
		"a PrometheusRule without alerts": {
			map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true, "alerts": map[string]any{
				"webhookDown": map[string]any{"enabled": false}, "controllerDown": map[string]any{"enabled": false},
				"ruleNotReady": map[string]any{"enabled": false}, "sourceNotSynced": map[string]any{"enabled": false},
				"decisionErrors": map[string]any{"enabled": false}, "decisionLatency": map[string]any{"enabled": false},
				"danglingReferences": map[string]any{"enabled": false},
			}}}},
			"needs at least one alert", true,
		},
		"an error fraction above 1": {
			map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"alerts": map[string]any{"decisionErrors": map[string]any{"threshold": 5}}}}},
			"/metrics/prometheusRule/alerts/decisionErrors/threshold", false,
		},
		"not a Prometheus duration": {
			map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"alerts": map[string]any{"ruleNotReady": map[string]any{"for": "15 minutes"}}}}},
			"/metrics/prometheusRule/alerts/ruleNotReady/for", false,
		},
		"a misspelled alert": {
			map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"alerts": map[string]any{"webhookUnavailable": map[string]any{"for": "1m"}}}}},
			"webhookUnavailable", false,
		},
		"a dashboard label value that is not a label value": {
			map[string]any{"metrics": map[string]any{"grafanaDashboard": map[string]any{"labelValue": "yes please"}}},
			"/metrics/grafanaDashboard/labelValue", false,
		},
	} {
		t.Run(name, func(t *testing.T) {
			opts := helmchart.Options{ReleaseName: release, Namespace: namespace, Values: tc.values}
			if _, err := helmchart.Render(context.Background(), opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template: %v; want an error naming %q", err, tc.want)
			}
			if tc.byTemplate {
				return
			}
			if out, err := helmchart.Lint(context.Background(), opts); err == nil || !strings.Contains(string(out)+err.Error(), tc.want) {
				t.Errorf("helm lint: %v\n%s\nwant an error naming %q", err, out, tc.want)
			}
		})
	}
}

// chartMeta returns the version and appVersion of Chart.yaml.
func chartMeta(t *testing.T) (version, appVersion string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(helmchart.ChartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	return c.Version, c.AppVersion
}

func chartAppVersion(t *testing.T) string {
	_, v := chartMeta(t)
	return v
}

// The VERSION file is the one source of the version: `make chart-package`
// and `make docker-build` use it, and Chart.yaml must say the same, so that
// an unpackaged chart installs images that exist.
func TestChartVersionIsVERSION(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(helmchart.RepoRoot(), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(data))
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`).MatchString(want) {
		t.Fatalf("VERSION %q is not a semantic version", want)
	}
	if v, app := chartMeta(t); v != want || app != want {
		t.Errorf("Chart.yaml has version %q and appVersion %q; set both to %q, the content of VERSION", v, app, want)
	}
}

// valuePaths returns the dotted paths of the chart's values: the keys that
// values.schema.json describes, descending into objects whose default in
// values.yaml is a non-empty map with described properties. Maps passed
// through to Kubernetes (resources, podAnnotations, ...) are one value.
func valuePaths(t *testing.T) []string {
	t.Helper()
	dir := helmchart.ChartDir()
	var schema map[string]any
	data, err := os.ReadFile(filepath.Join(dir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	var values map[string]any
	data, err = os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	defs, _ := schema["definitions"].(map[string]any)
	resolve := func(s map[string]any) map[string]any {
		if ref, ok := s["$ref"].(string); ok {
			s, _ = defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
		}
		return s
	}
	var paths []string
	var walk func(prefix string, s map[string]any, v map[string]any)
	walk = func(prefix string, s map[string]any, v map[string]any) {
		props, _ := resolve(s)["properties"].(map[string]any)
		for k, p := range props {
			ps := resolve(p.(map[string]any))
			sub, isMap := v[k].(map[string]any)
			_, hasProps := ps["properties"]
			if _, inValues := v[k]; !inValues && k == "global" {
				continue // Helm's global values, not the chart's
			}
			if isMap && len(sub) > 0 && hasProps {
				walk(prefix+k+".", ps, sub)
				continue
			}
			paths = append(paths, prefix+k)
		}
	}
	walk("", schema, values)
	sort.Strings(paths)
	return paths
}

// Every value has a comment in values.yaml and a row in the chart's README,
// and values.yaml sets every value the schema describes.
func TestValuesAreDocumented(t *testing.T) {
	dir := helmchart.ChartDir()
	paths := valuePaths(t)
	if len(paths) < 50 {
		t.Fatalf("only %d values found: %v", len(paths), paths)
	}

	// The comment right above each key of values.yaml, by dotted path.
	commented := map[string]bool{}
	f, err := os.Open(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type level struct {
		indent int
		key    string
	}
	var stack []level
	key := regexp.MustCompile(`^(\s*)([A-Za-z][A-Za-z0-9]*):`)
	prevComment := false
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		trimmed := strings.TrimSpace(line)
		if trimmed == "" {
			prevComment = false
			continue
		}
		if strings.HasPrefix(trimmed, "#") {
			prevComment = true
			continue
		}
		if m := key.FindStringSubmatch(line); m != nil {
			indent := len(m[1])
			for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
				stack = stack[:len(stack)-1]
			}
			stack = append(stack, level{indent, m[2]})
			var parts []string
			for _, l := range stack {
				parts = append(parts, l.key)
			}
			commented[strings.Join(parts, ".")] = prevComment
		}
		prevComment = false
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}

	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	inTable := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z0-9.]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		inTable[m[1]] = true
	}

	for _, p := range paths {
		documented, inValues := commented[p]
		if !inValues {
			t.Errorf("values.yaml does not set %s", p)
		} else if !documented {
			t.Errorf("values.yaml: %s has no comment right above it", p)
		}
		if !inTable[p] {
			t.Errorf("README.md: the values table has no row for %s", p)
		}
	}
	for p := range inTable {
		if !slices.Contains(paths, p) {
			t.Errorf("README.md: the values table has a row for %s, which is not a value", p)
		}
	}
}
