// Command validate-manifests validates Kubernetes objects in YAML files
// against the OpenAPI schemas of the Kubernetes release it is built with: the
// definitions that k8s.io/kubernetes generates from the k8s.io/api types
// (pkg/generated/openapi), the same the API server publishes. It needs no
// cluster and no network.
//
// Usage:
//
//	validate-manifests [FILE...]
//
// It reads the YAML documents of each FILE (standard input if there is none,
// or for "-") and prints a JSON report to standard output: the Kubernetes
// version of the schemas and one entry per object. The exit code is 0 if
// every object that has a schema is valid, 1 if one is not, and 2 if the
// input cannot be read or parsed.
//
// An object of a kind Kubernetes has no schema for (a custom resource such
// as a cert-manager Certificate) is reported with an empty "schema" and is
// not an error: the caller has to check it in another way.
//
// The schemas are made strict before validating: an object schema that lists
// properties accepts no other field unless it preserves unknown fields, as
// the API server does with strict field validation. Kubernetes' published
// schemas leave that out, so without it a misspelled field would pass.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime/debug"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"
	"sigs.k8s.io/yaml"
)

// refPrefix is how the definitions refer to each other; the rest of a
// reference is the name of a definition.
const refPrefix = "#/definitions/"

// report is what the program prints.
type report struct {
	// KubernetesVersion is the version of k8s.io/kubernetes whose schemas
	// were used.
	KubernetesVersion string `json:"kubernetesVersion"`
	// Objects has one entry per object, in input order.
	Objects []result `json:"objects"`
}

// result is the outcome for one object.
type result struct {
	// Source is the file and the position of the document in it.
	Source     string `json:"source"`
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	// Schema is the definition the object was validated against, e.g.
	// io.k8s.api.apps.v1.Deployment; empty if Kubernetes has none for its
	// kind.
	Schema string `json:"schema,omitempty"`
	// Errors are the validation errors, sorted.
	Errors []string `json:"errors,omitempty"`
}

func main() {
	files := os.Args[1:]
	if len(files) == 0 {
		files = []string{"-"}
	}
	for _, f := range files {
		if strings.HasPrefix(f, "-") && f != "-" {
			fmt.Fprintf(os.Stderr, "usage: validate-manifests [FILE...]\nunknown flag %s\n", f)
			os.Exit(2)
		}
	}
	v := newValidator()
	rep := report{KubernetesVersion: kubernetesVersion()}
	invalid := false
	for _, f := range files {
		results, err := v.validateFile(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "Error: %v\n", err)
			os.Exit(2)
		}
		for _, r := range results {
			invalid = invalid || len(r.Errors) > 0
		}
		rep.Objects = append(rep.Objects, results...)
	}
	out, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: encoding the report: %v\n", err)
		os.Exit(2)
	}
	fmt.Println(string(out))
	if invalid {
		os.Exit(1)
	}
}

// kubernetesVersion returns the version of the k8s.io/kubernetes module the
// program was built with.
func kubernetesVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "k8s.io/kubernetes" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// validator validates objects against the generated definitions, expanded
// and made strict on first use.
type validator struct {
	defs     map[string]common.OpenAPIDefinition
	expanded map[string]spec.Schema
}

func newValidator() *validator {
	ref := func(name string) spec.Ref { return spec.MustCreateRef(refPrefix + name) }
	return &validator{
		defs:     generatedopenapi.GetOpenAPIDefinitions(ref),
		expanded: map[string]spec.Schema{},
	}
}

// validateFile validates every object in a YAML file ("-" is standard input).
func (v *validator) validateFile(name string) ([]result, error) {
	var in io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	} else {
		name = "<stdin>"
	}
	var results []result
	docs := utilyaml.NewYAMLReader(bufio.NewReader(in))
	for i := 0; ; i++ {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return results, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		source := fmt.Sprintf("%s#%d", name, i)
		var obj any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("parsing document %s: %w", source, err)
		}
		if obj == nil {
			continue // an empty document, e.g. after a trailing "---"
		}
		m, ok := obj.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("document %s is not an object but %T", source, obj)
		}
		results = append(results, v.validate(source, m))
	}
}

// validate validates one decoded object.
func (v *validator) validate(source string, obj map[string]any) result {
	r := result{Source: source}
	r.APIVersion, _ = obj["apiVersion"].(string)
	r.Kind, _ = obj["kind"].(string)
	if md, ok := obj["metadata"].(map[string]any); ok {
		r.Name, _ = md["name"].(string)
		r.Namespace, _ = md["namespace"].(string)
	}
	if r.APIVersion == "" || r.Kind == "" {
		r.Errors = []string{"apiVersion and kind are required"}
		return r
	}
	gv, err := schema.ParseGroupVersion(r.APIVersion)
	if err != nil {
		r.Errors = []string{fmt.Sprintf("apiVersion %q: %v", r.APIVersion, err)}
		return r
	}
	name, ok := definitionName(gv.WithKind(r.Kind))
	if !ok {
		return r // no schema: a custom resource
	}
	s, err := v.schema(name)
	if err != nil {
		r.Errors = []string{err.Error()}
		return r
	}
	r.Schema = name
	r.Errors = validateAgainst(&s, obj)
	return r
}

// definitionName returns the name of the OpenAPI definition of a built-in
// kind, e.g. io.k8s.api.apps.v1.Deployment: the model name of the Go type
// that client-go's scheme maps the kind to, under which k8s.io/kubernetes
// lists its generated definition.
func definitionName(gvk schema.GroupVersionKind) (string, bool) {
	obj, err := clientgoscheme.Scheme.New(gvk)
	if err != nil {
		return "", false
	}
	named, ok := obj.(interface{ OpenAPIModelName() string })
	if !ok {
		// The API types of this release all have a model name; fall back to
		// the Go package path and type name, the older naming scheme.
		t := reflect.TypeOf(obj)
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		return t.PkgPath() + "." + t.Name(), true
	}
	return named.OpenAPIModelName(), true
}

// validateAgainst runs the OpenAPI validation and returns its errors, sorted.
func validateAgainst(s *spec.Schema, obj map[string]any) (errs []string) {
	defer func() {
		// The validator panics on a schema it cannot handle; report that
		// rather than crash, so the object counts as invalid.
		if p := recover(); p != nil {
			errs = []string{fmt.Sprintf("validating: %v", p)}
		}
	}()
	res := validate.NewSchemaValidator(s, nil, "", strfmt.Default).Validate(obj)
	for _, e := range res.Errors {
		errs = append(errs, e.Error())
	}
	sort.Strings(errs)
	return errs
}

// schema returns the definition of name with every reference replaced by
// the definition it refers to, and made strict.
func (v *validator) schema(name string) (spec.Schema, error) {
	return v.expand(spec.Schema{SchemaProps: spec.SchemaProps{Ref: spec.MustCreateRef(refPrefix + name)}}, map[string]bool{})
}

// expand returns a copy of s in which every reference is replaced by the
// (expanded) definition it names, and every object schema with properties
// forbids other properties unless it preserves unknown fields. stack holds
// the definitions being expanded, to stop at recursive types (none of the
// workload kinds has one): below the second occurrence of a type any value
// is accepted. Expanded definitions are cached; the cache is only ever read
// after an expansion completed, so its entries are not modified.
func (v *validator) expand(s spec.Schema, stack map[string]bool) (spec.Schema, error) {
	if ref := s.Ref.String(); ref != "" {
		name, ok := strings.CutPrefix(ref, refPrefix)
		if !ok {
			return spec.Schema{}, fmt.Errorf("unsupported reference %q", ref)
		}
		if stack[name] {
			return spec.Schema{}, nil
		}
		if e, ok := v.expanded[name]; ok {
			return e, nil
		}
		def, ok := v.defs[name]
		if !ok {
			return spec.Schema{}, fmt.Errorf("no OpenAPI definition %q", name)
		}
		stack[name] = true
		e, err := v.expand(def.Schema, stack)
		delete(stack, name)
		if err != nil {
			return spec.Schema{}, fmt.Errorf("%s: %w", name, err)
		}
		v.expanded[name] = e
		return e, nil
	}

	out := s
	out.Definitions = nil
	if len(out.Type) == 0 && out.Format != "" {
		// An untyped schema with a format (int-or-string, quantity) gets
		// its types from oneOf. The validator would take the format for a
		// type and reject every number, so drop it; formats only constrain
		// strings anyway.
		out.Format = ""
	}
	var err error
	one := func(in *spec.Schema) *spec.Schema {
		if in == nil || err != nil {
			return in
		}
		var e spec.Schema
		e, err = v.expand(*in, stack)
		return &e
	}
	all := func(in []spec.Schema) []spec.Schema {
		if len(in) == 0 {
			return in
		}
		o := make([]spec.Schema, len(in))
		for i := range in {
			if p := one(&in[i]); p != nil {
				o[i] = *p
			}
		}
		return o
	}
	props := func(in map[string]spec.Schema) map[string]spec.Schema {
		if len(in) == 0 {
			return in
		}
		o := make(map[string]spec.Schema, len(in))
		for k, p := range in {
			o[k] = *one(&p)
		}
		return o
	}
	orBool := func(in *spec.SchemaOrBool) *spec.SchemaOrBool {
		if in == nil || in.Schema == nil {
			return in
		}
		return &spec.SchemaOrBool{Allows: in.Allows, Schema: one(in.Schema)}
	}

	out.Properties = props(s.Properties)
	out.PatternProperties = props(s.PatternProperties)
	out.AdditionalProperties = orBool(s.AdditionalProperties)
	out.AdditionalItems = orBool(s.AdditionalItems)
	out.AllOf = all(s.AllOf)
	out.OneOf = all(s.OneOf)
	out.AnyOf = all(s.AnyOf)
	out.Not = one(s.Not)
	if s.Items != nil {
		out.Items = &spec.SchemaOrArray{Schema: one(s.Items.Schema), Schemas: all(s.Items.Schemas)}
	}
	if err != nil {
		return spec.Schema{}, err
	}

	if len(out.Properties) > 0 && out.AdditionalProperties == nil && !preservesUnknownFields(s) {
		out.AdditionalProperties = &spec.SchemaOrBool{Allows: false}
	}
	return out, nil
}

// preservesUnknownFields reports whether a schema allows fields it does not
// list.
func preservesUnknownFields(s spec.Schema) bool {
	b, ok := s.Extensions.GetBool("x-kubernetes-preserve-unknown-fields")
	return ok && b
}
