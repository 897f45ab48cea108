package fieldpath

import (
	"reflect"
	"strings"
	"testing"
)

func TestResolveJSON(t *testing.T) {
	for _, tt := range resolveCases {
		t.Run(tt.name, func(t *testing.T) {
			p := MustParse(tt.path)
			got, err := p.ResolveJSON([]byte(tt.json))
			if err != nil {
				t.Fatalf("ResolveJSON(%s) unexpected error: %v", tt.json, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ResolveJSON(%s) = %#v, want %#v", tt.json, got, tt.want)
			}
			// The differential property: the raw JSON resolver agrees with
			// decoding the object and resolving the path on it.
			if decoded := p.Resolve(decode(t, tt.json)); !reflect.DeepEqual(got, decoded) {
				t.Errorf("ResolveJSON(%s) = %#v, but Resolve on the decoded object = %#v", tt.json, got, decoded)
			}
		})
	}
}

func TestContainsJSON(t *testing.T) {
	for _, tt := range resolveCases {
		t.Run(tt.name, func(t *testing.T) {
			p := MustParse(tt.path)
			wants := map[string]bool{"absent": false, "": false}
			for _, w := range tt.want {
				wants[w] = true
			}
			for want, contained := range wants {
				got, err := p.ContainsJSON([]byte(tt.json), want)
				if err != nil {
					t.Fatalf("ContainsJSON(%s, %q) unexpected error: %v", tt.json, want, err)
				}
				if got != contained {
					t.Errorf("ContainsJSON(%s, %q) = %v, want %v", tt.json, want, got, contained)
				}
			}
		})
	}
}

func TestContainsJSONInvalidUTF8Want(t *testing.T) {
	p := MustParse(".s")
	for _, want := range []string{"a\xff", "\xff"} {
		got, err := p.ContainsJSON([]byte("{\"s\":\""+want+"\"}"), want)
		if err != nil {
			t.Fatalf("ContainsJSON unexpected error: %v", err)
		}
		if got {
			t.Errorf("ContainsJSON(%q) = true for invalid UTF-8, but decoded strings are valid UTF-8", want)
		}
	}
}

func TestEachJSONStopsEarly(t *testing.T) {
	p := MustParse(".l[*]")
	// The document is malformed after the second element, which must not be
	// reached once fn returns false.
	data := []byte(`{"l":["a","b",tru]}`)
	var got []string
	err := p.EachJSON(data, func(v string) bool {
		got = append(got, v)
		return v != "b"
	})
	if err != nil {
		t.Fatalf("EachJSON unexpected error: %v", err)
	}
	if want := []string{"a", "b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("EachJSON visited %q, want %q", got, want)
	}

	if ok, err := p.ContainsJSON(data, "a"); !ok || err != nil {
		t.Errorf("ContainsJSON(%q) = %v, %v, want true, nil", "a", ok, err)
	}
	if ok, err := p.ContainsJSON(data, "c"); ok || err == nil {
		t.Errorf("ContainsJSON(%q) = %v, %v, want false and an error", "c", ok, err)
	}
}

var jsonErrorTests = []struct {
	name    string
	path    string
	json    string
	wantErr string
}{
	{name: "empty document", path: ".a", json: ``, wantErr: "invalid JSON object"},
	{name: "only whitespace", path: ".a", json: " \n\t", wantErr: "invalid JSON object"},
	{name: "array document", path: ".a", json: `["a"]`, wantErr: "top-level value at offset 0 is not an object"},
	{name: "string document", path: ".a", json: `"a"`, wantErr: "top-level value at offset 0 is not an object"},
	{name: "number document", path: ".a", json: `1`, wantErr: "top-level value at offset 0 is not an object"},
	{name: "null document", path: ".a", json: `null`, wantErr: "top-level value at offset 0 is not an object"},
	{name: "garbage document", path: ".a", json: `hello`, wantErr: "invalid JSON object"},
	{name: "truncated document", path: ".a", json: `{"a":"x"`, wantErr: "invalid JSON object"},
	{name: "truncated elsewhere", path: ".a", json: `{"a":"x","b":{"c":1}`, wantErr: "invalid JSON object"},
	{name: "unterminated string", path: ".a", json: `{"a":"x}`, wantErr: "invalid JSON object"},
	{name: "trailing data", path: ".a", json: `{"a":"x"} {}`, wantErr: "unexpected data after the top-level value at offset 10"},
	{name: "trailing garbage", path: ".a", json: `{"a":"x"}x`, wantErr: "unexpected data after the top-level value at offset 9"},
	{name: "trailing data after empty object", path: ".a", json: `{ } ]`, wantErr: "unexpected data after the top-level value at offset 4"},
	{name: "trailing comma", path: ".a", json: `{"a":"x", }`, wantErr: `unexpected ',' at offset 8`},
	{name: "leading comma", path: ".a", json: `{,"a":"x"}`, wantErr: "invalid JSON object"},
	{name: "array after whitespace", path: ".a", json: "\n [{}]", wantErr: "top-level value at offset 2 is not an object"},
	{name: "truncated after match", path: ".a", json: `{"a":"x","b":{"c":[1,2]`, wantErr: "invalid JSON object"},
	{name: "truncated nested object", path: ".a.b", json: `{"a":{"b":"x"`, wantErr: "invalid JSON object"},
	{name: "missing colon", path: ".a", json: `{"a" "x"}`, wantErr: "invalid JSON object"},
	{name: "missing comma", path: ".b", json: `{"a":"x" "b":"y"}`, wantErr: "invalid JSON object"},
	{name: "unquoted key", path: ".b", json: `{a:"x","b":"y"}`, wantErr: "invalid JSON object"},
	{name: "single quotes", path: ".a", json: `{'a':'x'}`, wantErr: "invalid JSON object"},
	{name: "bad literal on path", path: ".a", json: `{"a":nul}`, wantErr: "invalid JSON object"},
	{name: "bad literal before key", path: ".b", json: `{"a":tru,"b":"x"}`, wantErr: "invalid JSON object"},
	{name: "truncated list", path: ".l[*]", json: `{"l":["a","b"}`, wantErr: "invalid JSON object"},
	{name: "missing comma in list", path: ".l[*]", json: `{"l":["a" "b"]}`, wantErr: "invalid JSON object"},
	{name: "trailing comma in list", path: ".l[*]", json: `{"l":["a",]}`, wantErr: "invalid JSON object"},
	{name: "bad list element", path: ".l[*]", json: `{"l":["a",x]}`, wantErr: "invalid JSON object"},
	{name: "bad list element after whitespace", path: ".l[*]", json: `{"l":["a", x]}`, wantErr: "invalid JSON object"},
	{name: "bad nested list element", path: ".l[*][*]", json: `{"l":[["a", nul]]}`, wantErr: "invalid JSON object"},
	{name: "missing colon in nested object", path: ".s.a", json: `{"s":{"a" "x"}}`, wantErr: "invalid JSON object"},
	{name: "bad literal in nested object", path: ".s.b", json: `{"s":{"a":fals,"b":"x"}}`, wantErr: "invalid JSON object"},
	{name: "invalid escape in nested object", path: ".s.a", json: `{"s":{"a":"\x"}}`, wantErr: "invalid escape sequence"},
	{name: "invalid escape", path: ".a", json: `{"a":"\x"}`, wantErr: "invalid escape sequence"},
	{name: "truncated unicode escape", path: ".a", json: `{"a":"\u12"}`, wantErr: "invalid escape sequence"},
	{name: "invalid escape in key", path: ".b", json: `{"\q":"x","b":"y"}`, wantErr: "invalid escape sequence"},
	{name: "control character", path: ".a", json: "{\"a\":\"x\ny\"}", wantErr: "control character in string"},
	{name: "NUL character", path: ".l[*]", json: "{\"l\":[\"\x00\"]}", wantErr: "control character in string"},
}

func TestJSONErrors(t *testing.T) {
	for _, tt := range jsonErrorTests {
		t.Run(tt.name, func(t *testing.T) {
			p := MustParse(tt.path)
			got, err := p.ResolveJSON([]byte(tt.json))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ResolveJSON(%q) = %q, %v, want error containing %q", tt.json, got, err, tt.wantErr)
			}
			if got != nil {
				t.Errorf("ResolveJSON(%q) returned values %q with an error", tt.json, got)
			}
			ok, err := p.ContainsJSON([]byte(tt.json), "absent")
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ContainsJSON(%q) = %v, %v, want error containing %q", tt.json, ok, err, tt.wantErr)
			}
		})
	}
}

func TestContainsJSONDoesNotAllocate(t *testing.T) {
	tests := []struct {
		path, want string
	}{
		{".spec.vpcRef.name", "vpc-a"},
		{".spec.vpcRef.name", "absent"},
		{".spec.nics[*].vpcRef.name", "vpc-b"},
		{".spec.nics[*].vpcRef.name", "absent"},
	}
	data := []byte(k8sObject)
	for _, tt := range tests {
		p := MustParse(tt.path)
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := p.ContainsJSON(data, tt.want); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("ContainsJSON(%q, %q) allocates %v times, want 0", tt.path, tt.want, allocs)
		}
	}

	// Escaped values that fit the scratch buffer are decoded on the stack.
	p := MustParse(".s")
	escaped := []byte(`{"s":"caf\u00e9 \ud83d\ude00"}`)
	allocs := testing.AllocsPerRun(100, func() {
		if ok, err := p.ContainsJSON(escaped, "café 😀"); !ok || err != nil {
			t.Fatal(ok, err)
		}
	})
	if allocs != 0 {
		t.Errorf("ContainsJSON with escapes allocates %v times, want 0", allocs)
	}
}

func TestJSONDuplicateKeys(t *testing.T) {
	// Duplicate keys are not supported; this documents the current behaviour:
	// the first occurrence wins, whereas encoding/json uses the last one.
	tests := []struct {
		path, json string
		want       []string
	}{
		{".a", `{"a":"x","a":"y"}`, []string{"x"}},
		{".s.a", `{"s":{"a":"x","a":"y"}}`, []string{"x"}},
		{".s.a", `{"s":{"a":"x"},"s":{"a":"y"}}`, []string{"x"}},
	}
	for _, tt := range tests {
		got, err := MustParse(tt.path).ResolveJSON([]byte(tt.json))
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ResolveJSON(%s) = %q, %v, want %q", tt.json, got, err, tt.want)
		}
	}
}

func TestJSONZeroPath(t *testing.T) {
	var p Path
	got, err := p.ResolveJSON([]byte(`{"":"x","a":"y"}`))
	if err != nil || got != nil {
		t.Errorf("ResolveJSON of the zero Path = %q, %v, want nil, nil", got, err)
	}
	if _, err := p.ResolveJSON([]byte(`{"a":"y"`)); err == nil {
		t.Error("ResolveJSON of the zero Path did not report a truncated document")
	}
}

func TestJSONLenientInSkippedValues(t *testing.T) {
	// This documents a limit of the validation rather than a requirement:
	// values that are skipped over are only scanned far enough to find their
	// end, so these malformed documents resolve without an error.
	for _, data := range []string{
		`{"x":[1 2],"a":"v"}`,
		`{"x":{"y" "z"},"a":"v"}`,
		`{"x":1.2.3,"a":"v"}`,
		"{\"x\":\"control\ncharacter\",\"a\":\"v\"}",
		`{"x":{"y":"z",},"a":"v"}`,
	} {
		got, err := MustParse(".a").ResolveJSON([]byte(data))
		if err != nil || !reflect.DeepEqual(got, []string{"v"}) {
			t.Errorf("ResolveJSON(%q) = %q, %v, want [v], nil", data, got, err)
		}
	}
}

func TestNumberString(t *testing.T) {
	for literal, want := range map[string]string{
		"42": "42", "-7": "-7", "42.0": "42", "4.2e1": "42", "-1.5e3": "-1500", "0.10": "0.1", "1.5": "1.5",
		"9223372036854775807": "9223372036854775807", "1e400": "1e400", "not a number": "not a number",
	} {
		if got := NumberString(literal); got != want {
			t.Errorf("NumberString(%q) = %q, want %q", literal, got, want)
		}
	}
}
