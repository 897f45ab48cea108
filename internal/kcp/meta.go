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
	// SkipProtectionSetBy is the value of the annotation that records who
	// set skip-protection, if that user may delete the object (see
	// depv1alpha1.SkipProtectionSetting).
	SkipProtectionSetBy string
	// DeletionRequested is set when the object carries the
	// deletion-requested label (any value): its deletion may be deferred
	// until nothing references it, if DeletionRecord verifies (see package
	// records).
	DeletionRequested bool
	// DeletionRecord is the value of the deletion-request annotation: the
	// signed record of a deferred deletion.
	DeletionRecord string
	// Admission is the value of the admission label: the id of the
	// admission that last added references to the object (see
	// depv1alpha1.LabelAdmission).
	Admission string
}

// metaFields are the fields ReadMeta reads, and how each is kept.
var metaFields = []struct {
	path []string
	set  func(m *Meta, value string)
}{
	{[]string{"metadata", "name"}, func(m *Meta, v string) { m.Name = v }},
	{[]string{"metadata", "namespace"}, func(m *Meta, v string) { m.Namespace = v }},
	{[]string{"metadata", "generateName"}, func(m *Meta, v string) { m.GenerateName = v }},
	{[]string{"metadata", "uid"}, func(m *Meta, v string) { m.UID = types.UID(v) }},
	{[]string{"metadata", "resourceVersion"}, func(m *Meta, v string) { m.ResourceVersion = v }},
	// The time itself does not matter, only that there is one.
	{[]string{"metadata", "deletionTimestamp"}, func(m *Meta, _ string) { m.Terminating = true }},
	{[]string{"metadata", "annotations", logicalcluster.AnnotationKey}, func(m *Meta, v string) { m.Cluster = logicalcluster.Name(v) }},
	{[]string{"metadata", "annotations", depv1alpha1.AnnotationSkipProtection}, func(m *Meta, v string) { m.SkipProtection = v == "true" }},
	{[]string{"metadata", "annotations", depv1alpha1.AnnotationSkipProtectionSetBy}, func(m *Meta, v string) { m.SkipProtectionSetBy = v }},
	{[]string{"metadata", "labels", depv1alpha1.LabelDeletionRequested}, func(m *Meta, _ string) { m.DeletionRequested = true }},
	{[]string{"metadata", "annotations", depv1alpha1.AnnotationDeletionRequest}, func(m *Meta, v string) { m.DeletionRecord = v }},
	{[]string{"metadata", "labels", depv1alpha1.LabelAdmission}, func(m *Meta, v string) { m.Admission = v }},
}

// metaPaths are the paths of metaFields, as jsonparser takes them.
var metaPaths = func() [][]string {
	paths := make([][]string, len(metaFields))
	for i, f := range metaFields {
		paths[i] = f.path
	}
	return paths
}()

// ReadMeta reads the metadata of an object from its JSON in one pass,
// without decoding anything else. A field that is not a string (null
// aside) is an error.
func ReadMeta(raw []byte) (Meta, error) {
	var (
		m   Meta
		err error
	)
	jsonparser.EachKey(raw, func(i int, value []byte, typ jsonparser.ValueType, e error) {
		switch {
		case err != nil || typ == jsonparser.Null && e == nil:
			return
		case e != nil:
			err = e
		case typ != jsonparser.String:
			err = fmt.Errorf("%v is a %s, not a string", metaPaths[i], typ)
		default:
			s, e := jsonparser.ParseString(value)
			if e != nil {
				err = fmt.Errorf("failed to read %v: %w", metaPaths[i], e)
				return
			}
			metaFields[i].set(&m, s)
		}
	}, metaPaths...)
	if err != nil {
		return Meta{}, err
	}
	return m, nil
}
