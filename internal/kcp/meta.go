package kcp

import (
	"fmt"

	"github.com/buger/jsonparser"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// Meta is the metadata of an object that the project reads: where it lives,
// who it is, and whether it is being deleted. It is read straight from the
// object's JSON by ReadMeta; nothing else of the object is decoded.
type Meta struct {
	// Cluster is the logical cluster of the object, from its kcp.io/cluster
	// annotation.
	Cluster logicalcluster.Name
	// Namespace is empty for a cluster-scoped object.
	Namespace string
	// Name is the object's name; empty in a CREATE request that asks the
	// server to generate it.
	Name string
	// GenerateName is the prefix of a name the server generates.
	GenerateName string
	// UID is the object's UID.
	UID types.UID
	// ResourceVersion is the object's resourceVersion.
	ResourceVersion string
	// Terminating is set once the object has a deletionTimestamp.
	Terminating bool
	// SkipProtection is set when the object carries the skip-protection
	// annotation with the value "true".
	SkipProtection bool
}

// metaPaths are the fields ReadMeta reads, in the order of its switch.
var metaPaths = [][]string{
	{"metadata", "name"},
	{"metadata", "namespace"},
	{"metadata", "generateName"},
	{"metadata", "uid"},
	{"metadata", "resourceVersion"},
	{"metadata", "deletionTimestamp"},
	{"metadata", "annotations", logicalcluster.AnnotationKey},
	{"metadata", "annotations", depv1alpha1.AnnotationSkipProtection},
}

// ReadMeta reads the metadata of an object from its JSON in one pass,
// without decoding anything else. A field that is not a string (null
// aside) is an error.
func ReadMeta(raw []byte) (Meta, error) {
	var (
		m   Meta
		err error
	)
	jsonparser.EachKey(raw, func(i int, value []byte, typ jsonparser.ValueType, e error) {
		if err != nil {
			return
		}
		if e != nil {
			err = e
			return
		}
		if typ == jsonparser.Null {
			return
		}
		if typ != jsonparser.String {
			err = fmt.Errorf("%v is a %s, not a string", metaPaths[i], typ)
			return
		}
		s, e := jsonparser.ParseString(value)
		if e != nil {
			err = fmt.Errorf("failed to read %v: %w", metaPaths[i], e)
			return
		}
		switch i {
		case 0:
			m.Name = s
		case 1:
			m.Namespace = s
		case 2:
			m.GenerateName = s
		case 3:
			m.UID = types.UID(s)
		case 4:
			m.ResourceVersion = s
		case 5:
			// The time itself does not matter, only that there is one.
			m.Terminating = true
		case 6:
			m.Cluster = logicalcluster.Name(s)
		case 7:
			m.SkipProtection = s == "true"
		}
	}, metaPaths...)
	if err != nil {
		return Meta{}, err
	}
	return m, nil
}
