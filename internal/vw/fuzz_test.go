package vw

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzStreamList feeds arbitrary bytes to the streaming list decoder, which
// reads every list response of a live read and of a reflector: it must never
// panic, and on input that it accepts it must visit exactly the items that
// encoding/json finds, each as valid JSON and in order.
func FuzzStreamList(f *testing.F) {
	for _, s := range []string{
		`{"kind":"VirtualMachineList","apiVersion":"compute.io/v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}`,
		`{"items":null}`,
		`{"items":[]}`,
		`{"metadata":{"resourceVersion":"1"},"items":[1,"x",null,{"a":[{}]}]}`,
		`{"items":[{"metadata":{"name":"a"}},`,
		`{"items":{}}`,
		`{"items":[{}],"metadata":{"resourceVersion":"2"},"items":[{},{}]}`,
		`{"Items":[1],"METADATA":{"resourceVersion":"3"}}`,
		`{"\u0069tems":[{}]}`,
		`[]`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var visited [][]byte
		rv, err := StreamList(bytes.NewReader(data), func(item []byte) error {
			if !json.Valid(item) {
				t.Errorf("visited invalid JSON %q", item)
			}
			visited = append(visited, bytes.Clone(item))
			return nil
		})
		if err != nil {
			return
		}
		fields, dup, jerr := topLevelFields(data)
		if jerr != nil || dup {
			// StreamList accepts what it reads up to the closing brace
			// (trailing bytes are the server's business), and visits every
			// list of repeated keys, of which encoding/json keeps the last.
			return
		}
		var want []json.RawMessage
		if items, ok := fields["items"]; ok {
			if err := json.Unmarshal(items, &want); err != nil {
				t.Fatalf("StreamList accepted items that encoding/json refuses: %v in %q", err, data)
			}
		}
		if len(visited) != len(want) {
			t.Fatalf("visited %d items, encoding/json finds %d in %q", len(visited), len(want), data)
		}
		for i := range visited {
			if !jsonEqual(visited[i], want[i]) {
				t.Errorf("item %d is %s, encoding/json finds %s", i, visited[i], want[i])
			}
		}
		var meta struct {
			ResourceVersion string `json:"resourceVersion"`
		}
		if m, ok := fields["metadata"]; ok {
			if err := json.Unmarshal(m, &meta); err != nil {
				t.Fatalf("StreamList accepted metadata that encoding/json refuses: %v in %q", err, data)
			}
		}
		if rv != meta.ResourceVersion {
			t.Errorf("resourceVersion %q, want %q", rv, meta.ResourceVersion)
		}
	})
}

// topLevelFields returns the fields of the JSON object data by their exact
// names (encoding/json matches struct fields case-insensitively, StreamList
// does not), and whether a name is repeated.
func topLevelFields(data []byte) (map[string]json.RawMessage, bool, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, false, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return nil, false, err
	}
	seen := map[string]bool{}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, false, err
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, false, err
		}
		if seen[key.(string)] {
			return fields, true, nil
		}
		seen[key.(string)] = true
	}
	return fields, false, nil
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
