package index

import (
	"context"
	"fmt"
	"io"
	"net/url"

	"github.com/buger/jsonparser"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"
)

// maxObjectSize bounds what Lookup reads of one object; the API server
// stores objects of at most a few MB.
const maxObjectSize = 8 << 20

// Object is what Lookup reports of an object.
type Object struct {
	// Namespace is empty for a cluster-scoped object.
	Namespace string
	// Name is the object's name.
	Name string
	// UID is the object's UID.
	UID types.UID
	// Terminating is set once the object has a deletionTimestamp.
	Terminating bool
}

// Lookup reads the objects of src named name in cluster live, through the
// virtual workspace of the shard that serves the cluster: the object in
// namespace, or, if namespace is empty and the resource is namespaced, the
// objects of that name in every namespace. An object that does not exist is
// not reported, nor is anything in a cluster that does not bind the export.
// It returns an error wrapping ErrVersionNotServed if the export does not
// serve the version the rules name.
func (ix *Index) Lookup(ctx context.Context, src Source, cluster logicalcluster.Name, namespace, name string) ([]Object, error) {
	var found []Object
	err := ix.onShardOf(src, cluster, func(r *reader, state State) error {
		found = found[:0]
		if state.Phase == PhaseVersionNotServed {
			return fmt.Errorf("%w: %s", ErrVersionNotServed, state.Message)
		}
		if namespace == "" && state.Namespaced {
			params := url.Values{"fieldSelector": {fields.OneTermEqualSelector("metadata.name", name).String()}}
			_, err := r.list(ctx, resourcePath(cluster.Path(), src.Resource, ""), params, func(item []byte) error {
				found = append(found, ReadObject(item))
				return nil
			})
			return err
		}
		body, err := r.get(ctx, append(resourcePath(cluster.Path(), src.Resource, namespace), name), nil)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		defer drain(body)
		raw, err := io.ReadAll(io.LimitReader(body, maxObjectSize))
		if err != nil {
			return fmt.Errorf("failed to read %s %q: %w", src.Resource.GroupResource(), name, err)
		}
		found = append(found, ReadObject(raw))
		return nil
	})
	return found, err
}

// ReadObject reads name, namespace, uid and deletionTimestamp of an object
// from its raw JSON, and nothing else of it.
func ReadObject(raw []byte) Object {
	var o Object
	jsonparser.EachKey(raw, func(i int, value []byte, typ jsonparser.ValueType, _ error) {
		switch i {
		case 0:
			o.Name, _ = jsonparser.ParseString(value)
		case 1:
			o.Namespace, _ = jsonparser.ParseString(value)
		case 2:
			o.Terminating = typ != jsonparser.Null
		case 3:
			uid, _ := jsonparser.ParseString(value)
			o.UID = types.UID(uid)
		}
	}, []string{"metadata", "name"}, []string{"metadata", "namespace"}, []string{"metadata", "deletionTimestamp"}, []string{"metadata", "uid"})
	return o
}
