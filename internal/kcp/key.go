package kcp

import (
	"cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/logicalcluster/v3"
)

// ObjectKey identifies a cluster-scoped object across all workspaces of kcp:
// the logical cluster that holds it and its name. It identifies
// DependencyRules in the controller and in the webhook.
type ObjectKey struct {
	// Cluster is the logical cluster of the object.
	Cluster logicalcluster.Name
	// Name is the object's name.
	Name string
}

// KeyOf returns the key of obj, whose logical cluster kcp records in the
// kcp.io/cluster annotation.
func KeyOf(obj metav1.Object) ObjectKey {
	return ObjectKey{Cluster: logicalcluster.From(obj), Name: obj.GetName()}
}

// String renders the key as cluster/name, for logs and messages.
func (k ObjectKey) String() string {
	return k.Cluster.String() + "/" + k.Name
}

// Compare orders keys by cluster, then name.
func (k ObjectKey) Compare(o ObjectKey) int {
	return cmp.Or(cmp.Compare(k.Cluster, o.Cluster), cmp.Compare(k.Name, o.Name))
}
