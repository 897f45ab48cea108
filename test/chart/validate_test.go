package chart_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/opendefensecloud/dependency-controller/test/helmchart"
)

// Every object the chart renders is checked in two ways:
//
//   - Built-in kinds are validated against the OpenAPI schemas of the
//     Kubernetes release the project pins, by bin/validate-manifests
//     (hack/tools/validate-manifests: k8s.io/kube-openapi validation with
//     the definitions k8s.io/kubernetes generates from the k8s.io/api types,
//     made strict so that unknown fields are errors). No cluster, no network.
//     They are also decoded strictly (unknown or duplicate fields are errors)
//     into the typed k8s.io/api structs of this module.
//   - Kubernetes has no schemas for custom resources, and the chart's CRDs
//     (cert-manager's Issuer and Certificate, the Prometheus Operator's
//     ServiceMonitor and PrometheusRule) are not vendored here, so those are checked
//     structurally by customShapes below: apiVersion and kind, the required
//     fields, the types and enums of the fields the chart sets, and no
//     unknown fields in the parts the chart writes.

// validatorReport is the output of validate-manifests.
type validatorReport struct {
	KubernetesVersion string `json:"kubernetesVersion"`
	Objects           []struct {
		Source     string   `json:"source"`
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Name       string   `json:"name"`
		Schema     string   `json:"schema"`
		Errors     []string `json:"errors"`
	} `json:"objects"`
}

// validatorBinary returns bin/validate-manifests ($VALIDATE_MANIFESTS if
// set), failing the test if it is missing or older than its source.
func validatorBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("VALIDATE_MANIFESTS"); p != "" {
		return p
	}
	root := helmchart.RepoRoot()
	bin := filepath.Join(root, "bin", "validate-manifests")
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatalf("validate-manifests is not built (%v): run `make validate-manifests` in the repository root", err)
	}
	sources, _ := filepath.Glob(filepath.Join(root, "hack", "tools", "validate-manifests", "*"))
	for _, s := range sources {
		if src, err := os.Stat(s); err == nil && src.ModTime().After(st.ModTime()) {
			t.Fatalf("%s is older than %s: run `make validate-manifests` in the repository root", bin, s)
		}
	}
	return bin
}

// runValidator runs validate-manifests on a manifest and returns its report
// and whether it found the manifest valid.
func runValidator(t *testing.T, manifest []byte) (*validatorReport, bool) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(file, manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(validatorBinary(t), file)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var exit *exec.ExitError
	if runErr != nil && (!errors.As(runErr, &exit) || exit.ExitCode() != 1) {
		t.Fatalf("validate-manifests: %v: %s", runErr, stderr.String())
	}
	var rep validatorReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("decoding the report of validate-manifests: %v\n%s", err, stdout.String())
	}
	want, err := helmchart.KubeVersion()
	if err != nil {
		t.Fatal(err)
	}
	if rep.KubernetesVersion != want {
		t.Fatalf("validate-manifests uses the schemas of Kubernetes %s, but the project pins %s (k8s.io/api in go.mod): update hack/tools/validate-manifests/go.mod", rep.KubernetesVersion, want)
	}
	return &rep, runErr == nil
}

// strictDecoder decodes built-in kinds into their k8s.io/api types and fails
// on unknown and duplicate fields.
var strictDecoder = serializer.NewCodecFactory(clientgoscheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// decodeStrict decodes a built-in object strictly; ok is false for kinds
// Kubernetes does not know.
func decodeStrict(o *unstructured.Unstructured) (obj runtime.Object, ok bool, err error) {
	if !clientgoscheme.Scheme.Recognizes(o.GroupVersionKind()) {
		return nil, false, nil
	}
	data, err := json.Marshal(o.Object)
	if err != nil {
		return nil, true, err
	}
	obj, _, err = strictDecoder.Decode(data, nil, nil)
	return obj, true, err
}

// validateManifest checks every object of a rendered manifest as described
// at the top of this file and fails the test on any problem.
func validateManifest(t *testing.T, manifest []byte, objs []*unstructured.Unstructured) {
	t.Helper()
	rep, valid := runValidator(t, manifest)
	if len(rep.Objects) != len(objs) {
		t.Fatalf("validate-manifests saw %d objects, the manifest has %d", len(rep.Objects), len(objs))
	}
	for i, r := range rep.Objects {
		id := fmt.Sprintf("%s %s/%s", r.APIVersion, r.Kind, r.Name)
		for _, e := range r.Errors {
			t.Errorf("%s does not match the Kubernetes %s OpenAPI schema: %s", id, rep.KubernetesVersion, e)
		}
		o := objs[i]
		typed, builtin, err := decodeStrict(o)
		switch {
		case builtin && r.Schema == "":
			t.Errorf("%s: validate-manifests has no schema for a built-in kind", id)
		case builtin && err != nil:
			t.Errorf("%s: strict decoding: %v", id, err)
		case builtin && typed.GetObjectKind().GroupVersionKind() != o.GroupVersionKind():
			t.Errorf("%s decoded as %v", id, typed.GetObjectKind().GroupVersionKind())
		case !builtin:
			check, known := customShapes[o.GroupVersionKind()]
			if !known {
				t.Errorf("%s: neither a built-in kind nor a custom resource the tests know the shape of", id)
				continue
			}
			for _, e := range check.validate(o.GetKind(), o.Object) {
				t.Errorf("%s: %s", id, e)
			}
		}
	}
	if !valid && !t.Failed() {
		t.Errorf("validate-manifests failed without naming an error")
	}
}

// shape is a structural description of a custom resource: enough to catch
// a misspelled field, a wrong type or a missing required field in what the
// chart renders.
type shape struct {
	// typ is object, string, bool, int, array, stringMap or any.
	typ string
	// fields are the known fields of an object; any other is an error.
	// Nil accepts any field.
	fields map[string]shape
	// required are fields an object must have.
	required []string
	// items is the shape of an array's items.
	items *shape
	// enum are the allowed values of a string.
	enum []string
	// pattern is a regular expression a string must match.
	pattern *regexp.Regexp
}

func (s shape) validate(path string, v any) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, args...)) }
	switch s.typ {
	case "any":
	case "string":
		str, ok := v.(string)
		if !ok {
			bad("want a string, got %T", v)
			break
		}
		if len(s.enum) > 0 && !slices.Contains(s.enum, str) {
			bad("%q is not one of %v", str, s.enum)
		}
		if s.pattern != nil && !s.pattern.MatchString(str) {
			bad("%q does not match %s", str, s.pattern)
		}
	case "bool":
		if _, ok := v.(bool); !ok {
			bad("want a boolean, got %T", v)
		}
	case "int":
		switch n := v.(type) {
		case int64, int:
		case float64:
			if n != float64(int64(n)) {
				bad("want an integer, got %v", n)
			}
		default:
			bad("want an integer, got %T", v)
		}
	case "stringMap":
		m, ok := v.(map[string]any)
		if !ok {
			bad("want a map, got %T", v)
		}
		for k, e := range m {
			if _, ok := e.(string); !ok {
				bad("%s: want a string, got %T", k, e)
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			bad("want a list, got %T", v)
			break
		}
		if s.items != nil {
			for i, e := range a {
				errs = append(errs, s.items.validate(fmt.Sprintf("%s[%d]", path, i), e)...)
			}
		}
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			bad("want an object, got %T", v)
			break
		}
		for _, r := range s.required {
			if _, ok := m[r]; !ok {
				bad("%s is required", r)
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if s.fields == nil {
				continue
			}
			f, ok := s.fields[k]
			if !ok {
				bad("unknown field %q", k)
				continue
			}
			errs = append(errs, f.validate(path+"."+k, m[k])...)
		}
	default:
		bad("bad shape type %q", s.typ)
	}
	return errs
}

var (
	anyValue   = shape{typ: "any"}
	str        = shape{typ: "string"}
	boolean    = shape{typ: "bool"}
	integer    = shape{typ: "int"}
	stringMap  = shape{typ: "stringMap"}
	stringList = shape{typ: "array", items: &str}
	duration   = shape{typ: "string", pattern: regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`)}
	promDur    = shape{typ: "string", pattern: regexp.MustCompile(`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`)}
	anyList    = shape{typ: "array"}
)

func object(required []string, fields map[string]shape) shape {
	return shape{typ: "object", required: required, fields: fields}
}

// resource is the shape of a namespaced custom resource with the given spec.
func resource(apiVersion, kind string, spec shape) shape {
	return object([]string{"apiVersion", "kind", "metadata", "spec"}, map[string]shape{
		"apiVersion": {typ: "string", enum: []string{apiVersion}},
		"kind":       {typ: "string", enum: []string{kind}},
		"metadata": object([]string{"name", "namespace"}, map[string]shape{
			"name":        {typ: "string", pattern: regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)},
			"namespace":   str,
			"labels":      stringMap,
			"annotations": stringMap,
		}),
		"spec": spec,
	})
}

// issuerRef is a cert-manager ObjectReference to an issuer.
var issuerRef = object([]string{"name"}, map[string]shape{
	"name":  str,
	"kind":  {typ: "string", enum: []string{"Issuer", "ClusterIssuer"}},
	"group": str,
})

// customShapes are the custom resources the chart may render, after
// cert-manager.io/v1 and monitoring.coreos.com/v1 (the fields the chart can
// set, and the required ones).
var customShapes = map[schema.GroupVersionKind]shape{
	{Group: "cert-manager.io", Version: "v1", Kind: "Issuer"}: resource("cert-manager.io/v1", "Issuer", shape{
		typ: "object",
		fields: map[string]shape{
			"selfSigned": object(nil, map[string]shape{"crlDistributionPoints": stringList}),
			"ca":         object([]string{"secretName"}, map[string]shape{"secretName": str, "crlDistributionPoints": stringList, "ocspServers": stringList, "issuingCertificateURLs": stringList}),
		},
	}),
	{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}: resource("cert-manager.io/v1", "Certificate", object(
		[]string{"secretName", "issuerRef"},
		map[string]shape{
			"secretName":  str,
			"commonName":  {typ: "string", pattern: regexp.MustCompile(`^.{1,64}$`)},
			"dnsNames":    stringList,
			"ipAddresses": stringList,
			"isCA":        boolean,
			"duration":    duration,
			"renewBefore": duration,
			"usages": {typ: "array", items: &shape{typ: "string", enum: []string{
				"signing", "digital signature", "content commitment", "key encipherment", "key agreement",
				"data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
				"server auth", "client auth", "code signing", "email protection", "s/mime", "ipsec end system",
				"ipsec tunnel", "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc",
			}}},
			"privateKey": object(nil, map[string]shape{
				"algorithm":      {typ: "string", enum: []string{"RSA", "ECDSA", "Ed25519"}},
				"size":           integer,
				"encoding":       {typ: "string", enum: []string{"PKCS1", "PKCS8"}},
				"rotationPolicy": {typ: "string", enum: []string{"Never", "Always"}},
			}),
			"issuerRef": issuerRef,
		})),
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}: resource("monitoring.coreos.com/v1", "ServiceMonitor", object(
		[]string{"selector", "endpoints"},
		map[string]shape{
			"selector": object(nil, map[string]shape{"matchLabels": stringMap, "matchExpressions": anyList}),
			"namespaceSelector": object(nil, map[string]shape{
				"any":        boolean,
				"matchNames": stringList,
			}),
			"endpoints": {typ: "array", items: &shape{typ: "object", required: []string{"port"}, fields: map[string]shape{
				"port":              str,
				"path":              str,
				"scheme":            {typ: "string", enum: []string{"http", "https", "HTTP", "HTTPS"}},
				"interval":          promDur,
				"scrapeTimeout":     promDur,
				"relabelings":       {typ: "array", items: &anyValue},
				"metricRelabelings": {typ: "array", items: &anyValue},
			}}},
		})),
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}: resource("monitoring.coreos.com/v1", "PrometheusRule", object(
		nil,
		map[string]shape{
			"groups": {typ: "array", items: &shape{typ: "object", required: []string{"name"}, fields: map[string]shape{
				"name":     {typ: "string", pattern: regexp.MustCompile(`^.+$`)},
				"interval": promDur,
				"rules": {typ: "array", items: &shape{typ: "object", required: []string{"expr"}, fields: map[string]shape{
					"alert":           {typ: "string", pattern: regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)},
					"record":          str,
					"expr":            {typ: "string", pattern: regexp.MustCompile(`\S`)},
					"for":             promDur,
					"keep_firing_for": promDur,
					"labels":          stringMap,
					"annotations":     stringMap,
				}}},
			}}},
		})),
}

// A manifest with mistakes must fail the validation: the check that the
// validation is not vacuous.
func TestValidationCatchesBrokenManifests(t *testing.T) {
	const valid = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: ok
spec:
  replicas: 2
  selector:
    matchLabels: {app: x}
  template:
    metadata:
      labels: {app: x}
    spec:
      containers:
      - name: x
        image: x:1
        imagePullPolicy: IfNotPresent
        ports:
        - {name: webhook, containerPort: 9443}
        readinessProbe:
          httpGet: {path: /readyz, port: webhook}
`
	broken := map[string]struct {
		from, to string
		// want are substrings of the OpenAPI errors.
		want []string
	}{
		"misspelled field": {
			from: "imagePullPolicy: IfNotPresent", to: "imagePullPolicyy: IfNotPresent",
			want: []string{"spec.template.spec.containers[0].imagePullPolicyy in body is a forbidden property"},
		},
		"wrong type": {
			from: "replicas: 2", to: `replicas: "two"`,
			want: []string{"spec.replicas in body must be of type integer"},
		},
		"missing required field": {
			from: "- name: x\n", to: "- image: x:0\n",
			want: []string{"spec.template.spec.containers[0].name in body is required"},
		},
		"value not in the enum": {
			from: "imagePullPolicy: IfNotPresent", to: "imagePullPolicy: Sometimes",
			want: []string{"imagePullPolicy in body should be one of [Always IfNotPresent Never]"},
		},
	}

	objs, err := helmchart.Objects([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if rep, ok := runValidator(t, []byte(valid)); !ok || rep.Objects[0].Schema != "io.k8s.api.apps.v1.Deployment" {
		t.Fatalf("the valid Deployment does not pass: %+v", rep)
	}
	if _, _, err := decodeStrict(objs[0]); err != nil {
		t.Fatalf("the valid Deployment does not decode strictly: %v", err)
	}

	for name, b := range broken {
		t.Run(name, func(t *testing.T) {
			manifest := strings.Replace(valid, b.from, b.to, 1)
			if manifest == valid {
				t.Fatalf("%q is not in the manifest", b.from)
			}
			rep, ok := runValidator(t, []byte(manifest))
			if ok {
				t.Fatalf("validate-manifests accepts the manifest with a %s", name)
			}
			got := strings.Join(rep.Objects[0].Errors, "\n")
			for _, w := range b.want {
				if !strings.Contains(got, w) {
					t.Errorf("the errors do not say %q:\n%s", w, got)
				}
			}
			objs, err := helmchart.Objects([]byte(manifest))
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = decodeStrict(objs[0])
			if name != "missing required field" && name != "value not in the enum" && err == nil {
				t.Errorf("strict decoding accepts the manifest with a %s", name)
			}
		})
	}

	// Both mistakes at once: each is reported.
	both := strings.Replace(strings.Replace(valid, "replicas: 2", `replicas: "two"`, 1), "imagePullPolicy:", "imagePullPolicyy:", 1)
	rep, ok := runValidator(t, []byte(both))
	if ok || len(rep.Objects[0].Errors) != 2 {
		t.Errorf("want two errors for a misspelled field and a wrong type, got %q", rep.Objects[0].Errors)
	}

	// The structural checks of custom resources catch the same kinds of
	// mistakes.
	cert := map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": "c", "namespace": "n"},
		"spec": map[string]any{
			"secretName": "s", "dnsName": []any{"x"}, "isCA": "yes",
			"issuerRef": map[string]any{"kind": "Issuer"},
		},
	}
	errs := customShapes[schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}].validate("Certificate", cert)
	got := strings.Join(errs, "\n")
	for _, w := range []string{`unknown field "dnsName"`, "spec.isCA: want a boolean", "spec.issuerRef: name is required"} {
		if !strings.Contains(got, w) {
			t.Errorf("the structural check of a broken Certificate does not say %q:\n%s", w, got)
		}
	}
}
