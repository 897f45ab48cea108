package index

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// FuzzStreamList feeds arbitrary bytes to the streaming list decoder, which
// reads every list response of a live read and of a reflector: it must never
// panic, and on input that it accepts it must visit exactly the items that
// encoding/json finds, each as valid JSON.
func FuzzStreamList(f *testing.F) {
	for _, s := range []string{
		`{"kind":"VirtualMachineList","apiVersion":"compute.io/v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}`,
		`{"items":null}`,
		`{"items":[]}`,
		`{"metadata":{"resourceVersion":"1"},"items":[1,"x",null,{"a":[{}]}]}`,
		`{"items":[{"metadata":{"name":"a"}},`,
		`{"items":{}}`,
		`[]`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var visited [][]byte
		rv, err := streamList(bytes.NewReader(data), func(item []byte) error {
			if !json.Valid(item) {
				t.Errorf("visited invalid JSON %q", item)
			}
			visited = append(visited, bytes.Clone(item))
			return nil
		})
		if err != nil {
			return
		}
		var want struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if jerr := json.Unmarshal(data, &want); jerr != nil {
			// streamList accepts what it reads up to the closing brace;
			// trailing bytes are the server's business.
			return
		}
		if len(visited) != len(want.Items) {
			t.Fatalf("visited %d items, encoding/json finds %d in %q", len(visited), len(want.Items), data)
		}
		if rv != want.Metadata.ResourceVersion && want.Metadata.ResourceVersion != "" {
			t.Errorf("resourceVersion %q, want %q", rv, want.Metadata.ResourceVersion)
		}
	})
}

// FuzzDecodeObject feeds arbitrary objects and field paths to decodeObject,
// which turns every listed or watched dependent into what the index keeps:
// it must never panic, and what it reads at a path must be what the field
// path resolver reads there.
func FuzzDecodeObject(f *testing.F) {
	f.Add(`{"metadata":{"name":"vm-1","namespace":"default","uid":"0b5e3b0e-6b0a-4d7c-9a59-1a3f0e4f1c11","resourceVersion":"5","annotations":{"kcp.io/cluster":"abc"}},"spec":{"vpcRef":{"name":"vpc-a"}}}`, ".spec.vpcRef.name")
	f.Add(`{"metadata":{"name":"vm-2","deletionTimestamp":"2026-01-01T00:00:00Z"},"spec":{"nics":[{"vpc":"a"},{"vpc":"b"},{}]}}`, ".spec.nics[*].vpc")
	f.Add(`{"metadata":{"name":1}}`, ".spec.x")
	f.Add(`{"metadata":{"annotations":null},"spec":{"x":["a",null,"b"]}}`, ".spec.x[*]")
	f.Add(`{"spec":{"x":7}}`, ".spec.x")
	f.Fuzz(func(t *testing.T, data, path string) {
		p, err := fieldpath.Parse(path)
		if err != nil {
			return
		}
		o, err := decodeObject([]byte(data), []fieldpath.Path{p})
		if err != nil {
			if o != nil {
				t.Errorf("decodeObject returned an object with error %v", err)
			}
			return
		}
		want, err := p.ResolveJSON([]byte(data))
		if err != nil {
			t.Fatalf("decodeObject succeeded where ResolveJSON fails: %v", err)
		}
		if len(want) == 0 && len(o.Values[0]) == 0 {
			return
		}
		if !reflect.DeepEqual(o.Values[0], want) {
			t.Errorf("decodeObject read %q at %s, ResolveJSON %q", o.Values[0], p, want)
		}
		// What the store keeps is derived without surprises.
		d := toEntry(o).dependent()
		if d.Name != o.Name || d.Namespace != o.Namespace || d.Cluster != o.Cluster || d.Terminating != (o.DeletionTimestamp != nil) || d.UID != o.UID {
			t.Errorf("entry %+v does not match object %+v", d, o.ObjectMeta)
		}
	})
}
