package store

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// Object is what a reflector reads of one dependent, straight from the JSON
// of a list or a watch event (see Decode); the store keeps a smaller entry
// of each. Nothing else of the dependent is ever decoded.
type Object struct {
	metav1.ObjectMeta
	// Cluster is the logical cluster of the object (its kcp.io/cluster
	// annotation); kept apart from ObjectMeta so that no annotations map is
	// allocated per object.
	Cluster logicalcluster.Name
	// Admission is the value of its admission label (see
	// depv1alpha1.LabelAdmission), also kept apart from ObjectMeta: the id
	// of the admission that last added references to it.
	Admission string
	// Values holds, for each reference of the source, the references found
	// there.
	Values [][]fieldpath.Value
}

// GetObjectKind implements runtime.Object.
func (o *Object) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (o *Object) DeepCopyObject() runtime.Object {
	c := &Object{ObjectMeta: *o.DeepCopy(), Cluster: o.Cluster, Admission: o.Admission}
	for _, v := range o.Values {
		c.Values = append(c.Values, append([]fieldpath.Value(nil), v...))
	}
	return c
}

// ObjectList is a list of objects, as the reflector of a source lists them.
type ObjectList struct {
	metav1.ListMeta
	Items []Object
}

// GetObjectKind implements runtime.Object.
func (l *ObjectList) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (l *ObjectList) DeepCopyObject() runtime.Object {
	c := &ObjectList{ListMeta: *l.DeepCopy(), Items: make([]Object, len(l.Items))}
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*Object)
	}
	return c
}

// Decode reads an object from the JSON of a dependent: its metadata and
// admission label (see kcp.ReadMeta, which reads them in one pass) and the
// references it holds at each of paths.
func Decode(raw []byte, paths []fieldpath.Reference) (*Object, error) {
	m, err := kcp.ReadMeta(raw)
	if err != nil {
		return nil, err
	}
	o := &Object{
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion},
		Cluster:    m.Cluster,
		Admission:  m.Admission,
	}
	if m.Terminating {
		// The time itself does not matter, only that there is one.
		o.DeletionTimestamp = &metav1.Time{}
	}
	if len(paths) > 0 {
		o.Values = make([][]fieldpath.Value, len(paths))
		for i, p := range paths {
			if o.Values[i], err = p.ResolveJSON(raw); err != nil {
				return nil, fmt.Errorf("failed to read %s: %w", p, err)
			}
		}
	}
	return o, nil
}
