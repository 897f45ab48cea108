package index

import (
	"fmt"

	"github.com/buger/jsonparser"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// object is what the index reads of one dependent, straight from the JSON
// of a list or a watch event: the reflector of a source handles objects, and
// the store keeps a smaller Dependent of each. Nothing else of the dependent
// is ever decoded.
type object struct {
	metav1.ObjectMeta
	// Cluster is the logical cluster of the object (its kcp.io/cluster
	// annotation); kept apart from ObjectMeta so that no annotations map is
	// allocated per object.
	Cluster logicalcluster.Name
	// Values holds, for each path of the source, the strings found there.
	Values [][]string
}

// GetObjectKind implements runtime.Object.
func (o *object) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (o *object) DeepCopyObject() runtime.Object {
	c := &object{ObjectMeta: *o.DeepCopy(), Cluster: o.Cluster}
	for _, v := range o.Values {
		c.Values = append(c.Values, append([]string(nil), v...))
	}
	return c
}

// objectList is a list of objects, as the reflector of a source lists them.
type objectList struct {
	metav1.ListMeta
	Items []object
}

// GetObjectKind implements runtime.Object.
func (l *objectList) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (l *objectList) DeepCopyObject() runtime.Object {
	c := &objectList{ListMeta: *l.DeepCopy(), Items: make([]object, len(l.Items))}
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*object)
	}
	return c
}

var metadataPaths = [][]string{
	{"metadata", "name"},
	{"metadata", "namespace"},
	{"metadata", "uid"},
	{"metadata", "resourceVersion"},
	{"metadata", "deletionTimestamp"},
	{"metadata", "annotations", logicalcluster.AnnotationKey},
}

// decodeObject reads an object from the JSON of a dependent: its metadata
// and the strings at each of paths.
func decodeObject(raw []byte, paths []fieldpath.Path) (*object, error) {
	o := &object{}
	var err error
	jsonparser.EachKey(raw, func(i int, value []byte, typ jsonparser.ValueType, e error) {
		if e != nil {
			err = e
			return
		}
		if typ == jsonparser.Null {
			return
		}
		if typ != jsonparser.String {
			err = fmt.Errorf("%v is a %s, not a string", metadataPaths[i], typ)
			return
		}
		s, e := jsonparser.ParseString(value)
		if e != nil {
			err = fmt.Errorf("failed to read %v: %w", metadataPaths[i], e)
			return
		}
		switch i {
		case 0:
			o.Name = s
		case 1:
			o.Namespace = s
		case 2:
			o.UID = types.UID(s)
		case 3:
			o.ResourceVersion = s
		case 4:
			// The time itself does not matter, only that there is one.
			o.DeletionTimestamp = &metav1.Time{}
		case 5:
			o.Cluster = logicalcluster.Name(s)
		}
	}, metadataPaths...)
	if err != nil {
		return nil, err
	}
	if len(paths) > 0 {
		o.Values = make([][]string, len(paths))
		for i, p := range paths {
			if o.Values[i], err = p.ResolveJSON(raw); err != nil {
				return nil, fmt.Errorf("failed to read %s: %w", p, err)
			}
		}
	}
	return o, nil
}
