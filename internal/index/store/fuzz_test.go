package store

import (
	"reflect"
	"slices"
	"testing"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// FuzzDecodeObject feeds arbitrary objects and field paths to Decode, which
// turns every listed or watched dependent into what the index keeps: it must
// never panic, its metadata must be what kcp.ReadMeta reads, and what it
// reads at a path must be what the field path resolver reads there.
func FuzzDecodeObject(f *testing.F) {
	f.Add(`{"metadata":{"name":"vm-1","namespace":"default","uid":"0b5e3b0e-6b0a-4d7c-9a59-1a3f0e4f1c11","resourceVersion":"5","annotations":{"kcp.io/cluster":"abc"}},"spec":{"vpcRef":{"name":"vpc-a"}}}`, ".spec.vpcRef.name")
	f.Add(`{"metadata":{"name":"vm-2","deletionTimestamp":"2026-01-01T00:00:00Z"},"spec":{"nics":[{"vpc":"a"},{"vpc":"b"},{}]}}`, ".spec.nics[*].vpc")
	f.Add(`{"metadata":{"name":1}}`, ".spec.x")
	f.Add(`{"metadata":{"annotations":null},"spec":{"x":["a",null,"b"]}}`, ".spec.x[*]")
	f.Add(`{"metadata":{"generateName":"vm-","annotations":{"dependencies.opendefense.cloud/skip-protection":"true"}}}`, ".metadata.generateName")
	f.Add(`{"spec":{"x":7}}`, ".spec.x")
	f.Add(`{"metadata":{"name":"vm-3","labels":{"dependencies.opendefense.cloud/admission":"0123456789abcdef"}}}`, ".metadata.labels")
	f.Fuzz(func(t *testing.T, data, path string) {
		p, err := fieldpath.Parse(path)
		if err != nil {
			return
		}
		o, err := Decode([]byte(data), []fieldpath.Reference{fieldpath.PathReference(p)})
		m, merr := kcp.ReadMeta([]byte(data))
		if err != nil {
			if o != nil {
				t.Errorf("Decode returned an object with error %v", err)
			}
			return
		}
		if merr != nil {
			t.Fatalf("Decode succeeded where kcp.ReadMeta fails: %v", merr)
		}
		if o.Name != m.Name || o.Namespace != m.Namespace || o.UID != m.UID || o.ResourceVersion != m.ResourceVersion ||
			o.Cluster != m.Cluster || (o.DeletionTimestamp != nil) != m.Terminating || o.Admission != m.Admission {
			t.Errorf("Decode read %+v (cluster %q, admission %q), kcp.ReadMeta %+v", o.ObjectMeta, o.Cluster, o.Admission, m)
		}
		want, err := p.ResolveJSON([]byte(data))
		if err != nil {
			t.Fatalf("Decode succeeded where ResolveJSON fails: %v", err)
		}
		if len(o.Values) != 1 {
			t.Fatalf("Decode read %d values for one path", len(o.Values))
		}
		if len(want) != 0 || len(o.Values[0]) != 0 {
			var names []string
			for _, v := range o.Values[0] {
				names = append(names, v.Name)
			}
			if !reflect.DeepEqual(names, want) {
				t.Errorf("Decode read %q at %s, ResolveJSON %q", o.Values[0], p, want)
			}
		}
		// What the store keeps is derived without surprises.
		e := toEntry(o)
		d := e.dependent()
		if d.Name != o.Name || d.Namespace != o.Namespace || d.Cluster != o.Cluster || d.Terminating != (o.DeletionTimestamp != nil) || d.UID != o.UID {
			t.Errorf("entry %+v does not match object %+v", d, o.ObjectMeta)
		}
		n := 0
		for _, r := range e.refs {
			if r.path != 0 || !slices.Contains(o.Values[0], fieldpath.Value{Name: r.value}) {
				t.Errorf("entry holds %q at path %d, the object %q", r.value, r.path, o.Values)
			}
			n++
		}
		if n != len(o.Values[0]) {
			t.Errorf("entry holds %d values, the object %d", n, len(o.Values[0]))
		}
	})
}
