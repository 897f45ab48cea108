// Package storetest helps the tests of the index and of its store build
// dependents and read them back. It does not import package store, so
// that the store's own tests can use it too.
package storetest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// DependentJSON returns the raw JSON of a dependent as a reflector would
// hand it to the store: in logical cluster cluster, named nsName
// ("namespace/name", or a bare name for a cluster-scoped object), with the
// JSON spec, and being deleted if terminating.
func DependentJSON(cluster, nsName, spec string, terminating bool) []byte {
	ns, name, ok := strings.Cut(nsName, "/")
	if !ok {
		ns, name = "", nsName
	}
	meta := fmt.Sprintf(`"name":%q,"uid":"uid-%s","annotations":{"kcp.io/cluster":%q}`, name, name, cluster)
	if ns != "" {
		meta += fmt.Sprintf(`,"namespace":%q`, ns)
	}
	if terminating {
		meta += `,"deletionTimestamp":"2026-01-01T00:00:00Z"`
	}
	return []byte(`{"metadata":{` + meta + `},"spec":` + spec + `}`)
}

// Names renders dependents as cluster/namespace/name (terminating marked),
// sorted.
func Names(deps []kcp.Meta) []string {
	out := make([]string, 0, len(deps))
	for _, d := range deps {
		s := d.Cluster.String() + "/" + d.Namespace + "/" + d.Name
		if d.Terminating {
			s += " (terminating)"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
