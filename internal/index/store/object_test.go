package store

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

func TestDecode(t *testing.T) {
	paths := []fieldpath.Reference{vpcRef, nics}
	raw := `{"apiVersion":"compute.io/v1","kind":"VirtualMachine","metadata":{"name":"vm-1","namespace":"default","uid":"u-1",
		"resourceVersion":"42","deletionTimestamp":"2026-01-01T00:00:00Z","labels":{"a":"b","dependencies.opendefense.cloud/admission":"00000000000000ff"},
		"annotations":{"kcp.io/cluster":"c1","other":"x","dependencies.opendefense.cloud/skip-protection":"true"},"managedFields":[{"manager":"m"}]},
		"spec":{"vpcRef":{"name":"vpc-a"},"nics":[{"vpc":"vpc-b"},{"vpc":"vpc-c"},{"subnet":"s"}],"big":"` + strings.Repeat("x", 1000) + `"}}`
	o, err := Decode([]byte(raw), paths)
	if err != nil {
		t.Fatal(err)
	}
	want := &Object{
		ObjectMeta: metav1.ObjectMeta{
			Name: "vm-1", Namespace: "default", UID: "u-1", ResourceVersion: "42",
			DeletionTimestamp: &metav1.Time{},
		},
		Cluster:   "c1",
		Admission: "00000000000000ff",
		Values:    [][]fieldpath.Value{{{Name: "vpc-a"}}, {{Name: "vpc-b"}, {Name: "vpc-c"}}},
	}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("Decode() =\n  %+v\nwant only the metadata the index needs and the values at the paths:\n  %+v", o, want)
	}

	if o, err := Decode([]byte(`{"metadata":{"name":1}}`), nil); err == nil || o != nil {
		t.Errorf("a name that is not a string: %+v, %v", o, err)
	}
	if o, err := Decode([]byte(`{"metadata":{"name":"x"},"spec":{"vpcRef":{"name":"a\q"}}}`), paths); err == nil || o != nil {
		t.Errorf("malformed JSON at a path: %+v, %v", o, err)
	} else if !strings.Contains(err.Error(), vpcRef.String()) {
		t.Errorf("the error does not name the path: %v", err)
	}
	// A bookmark carries only a resourceVersion.
	o, err = Decode([]byte(`{"kind":"VirtualMachine","metadata":{"resourceVersion":"77"}}`), paths)
	if err != nil || o.ResourceVersion != "77" || o.DeletionTimestamp != nil {
		t.Errorf("bookmark: %+v, %v", o, err)
	}
	// Without paths, no values.
	o, err = Decode([]byte(raw), nil)
	if err != nil || o.Values != nil || o.Name != "vm-1" {
		t.Errorf("without paths: %+v, %v", o, err)
	}
	// A path that the object does not have holds nothing.
	o, err = Decode([]byte(`{"metadata":{"name":"vm-2"},"spec":{}}`), paths)
	if err != nil || len(o.Values) != 2 || len(o.Values[0]) != 0 || len(o.Values[1]) != 0 {
		t.Errorf("without values: %+v, %v", o, err)
	}
}

// A deep copy shares nothing with the original.
func TestObjectDeepCopy(t *testing.T) {
	o, err := Decode([]byte(`{"metadata":{"name":"vm-1","resourceVersion":"3","deletionTimestamp":"2026-01-01T00:00:00Z","annotations":{"kcp.io/cluster":"c1"},"labels":{"dependencies.opendefense.cloud/admission":"0123456789abcdef"}},
		"spec":{"vpcRef":{"name":"vpc-a"},"nics":[{"vpc":"vpc-b"}]}}`), []fieldpath.Reference{vpcRef, nics})
	if err != nil {
		t.Fatal(err)
	}
	c := o.DeepCopyObject().(*Object)
	if !reflect.DeepEqual(c, o) {
		t.Fatalf("DeepCopyObject() = %+v, want %+v", c, o)
	}
	c.Values[1][0].Name = "changed"
	c.DeletionTimestamp.Time = c.DeletionTimestamp.Add(1)
	if o.Values[1][0].Name != "vpc-b" || !o.DeletionTimestamp.IsZero() {
		t.Errorf("the copy shares its values with the original: %+v", o)
	}
	list := &ObjectList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}, Items: []Object{*o}}
	lc := list.DeepCopyObject().(*ObjectList)
	if !reflect.DeepEqual(lc, list) {
		t.Fatalf("ObjectList.DeepCopyObject() = %+v, want %+v", lc, list)
	}
	lc.Items[0].Values[0][0].Name = "changed"
	if list.Items[0].Values[0][0].Name != "vpc-a" {
		t.Error("the list's copy shares its values with the original")
	}
}
