package fieldpath

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, tt := range parseTests {
		f.Add(tt.in)
	}
	for _, tt := range resolveCases {
		f.Add(tt.path)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if got, want := err == nil, matchesPattern(s); got != want {
			t.Fatalf("Parse(%q) error = %v, but Pattern and MaxLength accept it: %v", s, err, want)
		}
		if err != nil {
			if prefix := "invalid field path " + strconv.Quote(s) + ": "; !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("Parse(%q) error = %q, want prefix %q", s, err, prefix)
			}
			return
		}
		if got, want := p.String(), "."+strings.TrimPrefix(s, "."); got != want {
			t.Errorf("Parse(%q).String() = %q, want %q", s, got, want)
		}
		checkReparse(t, p)
	})
}

func FuzzResolveJSON(f *testing.F) {
	for _, tt := range resolveCases {
		f.Add(tt.path, []byte(tt.json))
	}
	for _, tt := range jsonErrorTests {
		f.Add(tt.path, []byte(tt.json))
	}
	f.Add(".b", []byte(`{"a":1e700,"b":"x","c":[-1e-700]}`))
	for _, path := range []string{"kind", ".metadata.labels.tier", ".metadata.managedFields[*].manager", ".spec.nics[*].name", ".spec.nics[*]", ".status.conditions[*].type"} {
		f.Add(path, []byte(k8sObject))
	}
	f.Fuzz(func(t *testing.T, path string, data []byte) {
		p, err := Parse(path)
		if err != nil {
			return
		}

		got, err := p.ResolveJSON(data)
		if err != nil && got != nil {
			t.Errorf("ResolveJSON returned values %q with error %v", got, err)
		}
		// Whatever the input, ContainsJSON must agree with ResolveJSON when
		// the latter succeeds. On errors ContainsJSON may find a match before
		// reaching the malformed part.
		if err == nil {
			for _, want := range append([]string{"absent", ""}, got...) {
				ok, cerr := p.ContainsJSON(data, want)
				if cerr != nil {
					t.Errorf("ContainsJSON(%q) error %v, but ResolveJSON succeeded", want, cerr)
				}
				if contained := contains(got, want); ok != contained {
					t.Errorf("ContainsJSON(%q) = %v, but ResolveJSON = %q", want, ok, got)
				}
			}
		}

		if !json.Valid(data) {
			return // the raw JSON resolvers do not fully validate
		}
		// Numbers are ignored, so decode them as json.Number, which cannot
		// overflow (json.Unmarshal rejects 1e400 as a float64).
		var decoded any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if derr := dec.Decode(&decoded); derr != nil {
			t.Fatalf("decoding valid JSON failed: %v", derr)
		}
		obj, isObject := decoded.(map[string]any)
		if !isObject {
			if err == nil {
				t.Errorf("ResolveJSON(%q) succeeded on a document that is not an object", data)
			}
			return
		}
		if hasDuplicateKeys(data) {
			return // not supported
		}
		if err != nil {
			t.Fatalf("ResolveJSON(%q) error on a valid object: %v", data, err)
		}
		if want := p.Resolve(obj); !reflect.DeepEqual(got, want) {
			t.Errorf("ResolveJSON(%q) = %#v, but Resolve on the decoded object = %#v", data, got, want)
		}
	})
}

func contains(values []string, want string) bool {
	for _, v := range values {
		if v == want {
			return true
		}
	}
	return false
}

// hasDuplicateKeys reports whether any object in the valid JSON document data
// has two keys that are equal after decoding.
func hasDuplicateKeys(data []byte) bool {
	type frame struct {
		keys    map[string]bool // nil for lists
		wantKey bool            // the next string is a key
	}
	var stack []*frame
	dec := json.NewDecoder(bytes.NewReader(data))
	// Numbers as written: one that overflows a float64 (1e700) is valid
	// JSON, and must not end the scan before a later duplicate.
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return false // io.EOF, as data is valid
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if key, ok := tok.(string); ok && top != nil && top.keys != nil && top.wantKey {
			if top.keys[key] {
				return true
			}
			top.keys[key] = true
			top.wantKey = false
			continue
		}
		switch tok {
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		}
		// tok starts or is a value. In an object, a key comes next.
		if top != nil && top.keys != nil {
			top.wantKey = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, wantKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		}
	}
}

func TestHasDuplicateKeys(t *testing.T) {
	tests := []struct {
		json string
		want bool
	}{
		{`{}`, false},
		{`{"a":1,"b":{"a":2},"c":[{"a":1,"b":2}]}`, false},
		{`{"a":"b","b":"a"}`, false},
		{`{"a":1,"a":2}`, true},
		{`{"a":{"b":1},"c":[],"a":2}`, true},
		{`{"x":[{"a":1},{"b":{"c":1,"c":2}}]}`, true},
		{`{"a":1,"\u0061":2}`, true},
		{`[{"a":1},{"a":1}]`, false},
	}
	for _, tt := range tests {
		if got := hasDuplicateKeys([]byte(tt.json)); got != tt.want {
			t.Errorf("hasDuplicateKeys(%s) = %v, want %v", tt.json, got, tt.want)
		}
	}
}
