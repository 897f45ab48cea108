package fieldpath

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// resolveCase is a path resolved against a JSON object. The cases are shared
// by the tests of Resolve (on the decoded object), the raw JSON resolvers and
// the fuzz targets, whose results must all agree.
type resolveCase struct {
	name string
	path string
	json string
	want []string
}

// k8sObject is a realistic Kubernetes object, also used by the benchmarks.
const k8sObject = `{
  "apiVersion": "compute.example.com/v1alpha1",
  "kind": "VirtualMachine",
  "metadata": {
    "name": "web-1",
    "namespace": "default",
    "uid": "0f3a6c1e-5b7d-4e2a-9c8f-1d2e3f4a5b6c",
    "resourceVersion": "123456",
    "creationTimestamp": "2025-01-02T03:04:05Z",
    "labels": {"app.kubernetes.io/name": "web", "tier": "frontend"},
    "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"vpcRef\":{\"name\":\"old\"}}}"},
    "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:vpcRef": {}}}}]
  },
  "spec": {
    "vpcRef": {"name": "vpc-a"},
    "cpu": 4,
    "nics": [
      {"name": "eth0", "vpcRef": {"name": "vpc-a"}, "primary": true},
      {"name": "eth1", "vpcRef": {"name": "vpc-b"}}
    ]
  },
  "status": {"conditions": [{"type": "Ready", "status": "True"}]}
}`

var resolveCases = []resolveCase{
	{name: "plain path", path: ".spec.vpcRef.name", json: `{"spec":{"vpcRef":{"name":"vpc"}}}`, want: []string{"vpc"}},
	{name: "plain path without leading dot", path: "spec.vpcRef.name", json: `{"spec":{"vpcRef":{"name":"vpc"}}}`, want: []string{"vpc"}},
	{name: "top-level field", path: "kind", json: `{"kind":"Foo","apiVersion":"v1"}`, want: []string{"Foo"}},
	{name: "sibling keys", path: ".spec.b", json: `{"spec":{"a":"x","b":"y","c":"z"}}`, want: []string{"y"}},
	{name: "key prefix does not match", path: ".spec.name", json: `{"spec":{"nam":"x","names":"y","Name":"z"}}`},
	{name: "key of a nested object does not match", path: ".name", json: `{"spec":{"name":"x"}}`},
	{name: "empty object", path: ".spec.name", json: `{}`},
	{name: "missing leaf", path: ".spec.vpcRef.name", json: `{"spec":{"vpcRef":{}}}`},
	{name: "missing intermediate", path: ".spec.vpcRef.name", json: `{"spec":{"other":{"name":"x"}}}`},
	{name: "missing top-level field", path: ".spec.vpcRef.name", json: `{"metadata":{"name":"x"}}`},
	{name: "empty string", path: ".spec.name", json: `{"spec":{"name":""}}`, want: []string{""}},
	{name: "number leaf as a string (int-or-string fields)", path: ".spec.name", json: `{"spec":{"name":42}}`, want: []string{"42"}},
	{name: "integral float leaf as an integer", path: ".spec.name", json: `{"spec":{"name":-1.5e3}}`, want: []string{"-1500"}},
	{name: "float leaf as its shortest decimal", path: ".spec.name", json: `{"spec":{"name":0.10}}`, want: []string{"0.1"}},
	{name: "integral float with a fraction part", path: ".spec.name", json: `{"spec":{"name":42.0}}`, want: []string{"42"}},
	{name: "bool leaf ignored", path: ".spec.name", json: `{"spec":{"name":true}}`},
	{name: "null leaf ignored", path: ".spec.name", json: `{"spec":{"name":null}}`},
	{name: "object leaf ignored", path: ".spec.name", json: `{"spec":{"name":{"name":"x"}}}`},
	{name: "list leaf ignored", path: ".spec.names", json: `{"spec":{"names":["a","b"]}}`},
	{name: "null intermediate", path: ".spec.vpcRef.name", json: `{"spec":{"vpcRef":null}}`},
	{name: "string intermediate", path: ".spec.vpcRef.name", json: `{"spec":{"vpcRef":"name"}}`},
	{name: "list intermediate without wildcard", path: ".spec.nics.name", json: `{"spec":{"nics":[{"name":"x"}]}}`},
	{name: "wildcard over objects", path: ".spec.nics[*].vpcRef.name", json: `{"spec":{"nics":[{"vpcRef":{"name":"a"}},{"vpcRef":{"name":"b"}},{"vpcRef":{"name":"a"}}]}}`, want: []string{"a", "b", "a"}},
	{name: "wildcard over objects with gaps", path: ".spec.nics[*].vpcRef.name", json: `{"spec":{"nics":[{"vpcRef":{"name":"a"}},{},{"vpcRef":null},{"vpcRef":{"name":3}},{"vpcRef":{"name":"b"}}]}}`, want: []string{"a", "3", "b"}},
	{name: "wildcard over strings", path: ".spec.vpcNames[*]", json: `{"spec":{"vpcNames":["a","b","c"]}}`, want: []string{"a", "b", "c"}},
	{name: "wildcard over mixed elements", path: ".spec.vpcNames[*]", json: `{"spec":{"vpcNames":["a",1,null,true,{"x":"y"},["z"],"b",-0.5,false]}}`, want: []string{"a", "1", "b", "-0.5"}},
	{name: "wildcard over empty list", path: ".spec.vpcNames[*]", json: `{"spec":{"vpcNames":[]}}`},
	{name: "wildcard over empty list with fields", path: ".spec.nics[*].name", json: `{"spec":{"nics":[ ]}}`},
	{name: "wildcard over object ignored", path: ".spec.vpcNames[*]", json: `{"spec":{"vpcNames":{"a":"x","b":"y"}}}`},
	{name: "wildcard over string ignored", path: ".spec.vpcNames[*]", json: `{"spec":{"vpcNames":"abc"}}`},
	{name: "wildcard over null ignored", path: ".spec.vpcNames[*]", json: `{"spec":{"vpcNames":null}}`},
	{name: "wildcard over number ignored", path: ".spec.vpcNames[*]", json: `{"spec":{"vpcNames":7}}`},
	{name: "nested wildcards", path: ".spec.matrix[*][*].ref", json: `{"spec":{"matrix":[[{"ref":"a"},{"ref":"b"}],[],[{"ref":"c"}],{"ref":"x"},"y",[{"ref":1},{"ref":"d"}]]}}`, want: []string{"a", "b", "c", "1", "d"}},
	{name: "nested wildcards over strings", path: ".m[*][*]", json: `{"m":[["a","b"],"c",["d",["e"]],null]}`, want: []string{"a", "b", "d"}},
	{name: "triple wildcards", path: ".m[*][*][*]", json: `{"m":[[["a"],["b","c"]],[[],["d"]]]}`, want: []string{"a", "b", "c", "d"}},
	{name: "wildcards at several levels", path: ".a[*].b[*].c", json: `{"a":[{"b":[{"c":"1"},{"c":"2"}]},{"b":[{"c":"3"}]},{"b":{"c":"x"}}]}`, want: []string{"1", "2", "3"}},
	{name: "duplicate values kept", path: ".l[*]", json: `{"l":["a","a"]}`, want: []string{"a", "a"}},
	{name: "keys with dashes and underscores", path: ".my-field.other_field", json: `{"my-field":{"other_field":"v"}}`, want: []string{"v"}},
	{name: "empty key", path: ".a", json: `{"":"x","a":"y"}`, want: []string{"y"}},
	{name: "empty key nested", path: ".a.b", json: `{"a":{"":{"b":"x"},"b":"y"}}`, want: []string{"y"}},
	{name: "numeric key", path: ".data.0", json: `{"data":{"0":"zero"}}`, want: []string{"zero"}},
	{name: "case sensitive keys", path: ".spec.Name", json: `{"spec":{"name":"lower","NAME":"upper","Name":"mixed"}}`, want: []string{"mixed"}},
	{name: "whitespace everywhere", path: ".spec.nics[*].name", json: " \t\r\n{ \"spec\" :\n{\t\"nics\" : [ { \"name\" : \"a\" } ,\r\n {\"name\":\"b\"} ] } }\n ", want: []string{"a", "b"}},
	{name: "strings containing structural characters", path: ".spec.b", json: `{"spec":{"a":"}]{[,:\"","b":"x,y}]"}}`, want: []string{"x,y}]"}},
	{name: "brackets in skipped strings", path: ".b", json: `{"a":{"x":"}}}"},"b":"ok"}`, want: []string{"ok"}},
	{name: "escaped leaf", path: ".spec.vpcRef.name", json: `{"spec":{"vpcRef":{"name":"\u0076pc"}}}`, want: []string{"vpc"}},
	{name: "all simple escapes", path: ".s", json: `{"s":"\"\\\/\b\f\n\r\t"}`, want: []string{"\"\\/\b\f\n\r\t"}},
	{name: "unicode escapes", path: ".s", json: `{"s":"caf\u00e9 \u20AC \ud83d\ude00"}`, want: []string{"café € 😀"}},
	{name: "lone surrogates", path: ".s", json: `{"s":"a\ud800b\udc00c\ud800\u0041"}`, want: []string{"a\uFFFDb\uFFFDc\uFFFDA"}},
	{name: "long escaped string", path: ".s", json: `{"s":"` + strings.Repeat(`\u0061`, 100) + `"}`, want: []string{strings.Repeat("a", 100)}},
	{name: "raw UTF-8", path: ".s", json: `{"s":"café 😀"}`, want: []string{"café 😀"}},
	{name: "invalid UTF-8", path: ".s", json: "{\"s\":\"a\xffb\xc3\"}", want: []string{"a\uFFFDb\uFFFD"}},
	{name: "invalid UTF-8 and escapes", path: ".s", json: "{\"s\":\"\xe2\x82\\u00e9\"}", want: []string{"\uFFFD\uFFFDé"}},
	{name: "escaped keys", path: ".spec.vpcRef.name", json: `{"sp\u0065c":{"vpc\u0052ef":{"n\u0061me":"x"}}}`, want: []string{"x"}},
	{name: "escaped key with quote", path: ".a", json: `{"a\"":"wrong","a":"right"}`, want: []string{"right"}},
	{name: "realistic object", path: ".spec.vpcRef.name", json: k8sObject, want: []string{"vpc-a"}},
	{name: "realistic object with wildcard", path: ".spec.nics[*].vpcRef.name", json: k8sObject, want: []string{"vpc-a", "vpc-b"}},
	{name: "realistic object metadata", path: "metadata.name", json: k8sObject, want: []string{"web-1"}},
	{name: "realistic object status", path: ".status.conditions[*].status", json: k8sObject, want: []string{"True"}},
}

// decode decodes a JSON object like the API machinery does.
func decode(t testing.TB, data string) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal([]byte(data), &obj); err != nil {
		t.Fatalf("invalid test object %q: %v", data, err)
	}
	return obj
}

func TestResolve(t *testing.T) {
	for _, tt := range resolveCases {
		t.Run(tt.name, func(t *testing.T) {
			got := MustParse(tt.path).Resolve(decode(t, tt.json))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Resolve(%s) = %#v, want %#v", tt.json, got, tt.want)
			}
		})
	}
}

func TestResolveUnstructured(t *testing.T) {
	tests := []struct {
		name string
		path string
		obj  map[string]any
		want []string
	}{
		{name: "nil object", path: ".a", obj: nil},
		{name: "int64 leaf as a string", path: ".a", obj: map[string]any{"a": int64(1)}, want: []string{"1"}},
		{name: "float64 leaf as a string", path: ".a", obj: map[string]any{"a": 2.5}, want: []string{"2.5"}},
		{name: "nil leaf ignored", path: ".a", obj: map[string]any{"a": nil}},
		{name: "nil map intermediate", path: ".a.b", obj: map[string]any{"a": map[string]any(nil)}},
		{name: "nil list", path: ".a[*]", obj: map[string]any{"a": []any(nil)}},
		{name: "typed string slice ignored", path: ".a[*]", obj: map[string]any{"a": []string{"x"}}},
		{name: "typed map ignored", path: ".a.b", obj: map[string]any{"a": map[string]string{"b": "x"}}},
		{name: "list of maps", path: ".a[*].b", obj: map[string]any{"a": []any{
			map[string]any{"b": "x"}, nil, "b", map[string]any{"b": "y"},
		}}, want: []string{"x", "y"}},
		{name: "zero path", path: "", obj: map[string]any{"a": "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Path
			if tt.path != "" {
				p = MustParse(tt.path)
			}
			if got := p.Resolve(tt.obj); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Resolve(%v) = %#v, want %#v", tt.obj, got, tt.want)
			}
		})
	}
}
