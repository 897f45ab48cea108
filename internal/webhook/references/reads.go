package references

import (
	"context"
	"fmt"
	"slices"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// listThreshold is how many of the references a write adds must name
// objects of one namespace (of one protected type) for them to be read
// with one LIST of the namespace (see Targets.ListTargets) rather than a
// GET each: kcp answers a LIST of a few hundred small objects for about
// what a GET costs, and a request with a handful of references reads no
// more than it names.
const listThreshold = 16

// listFactor bounds what such a LIST reads: at most listFactor objects per
// reference. kcp serves a LIST for a small fraction of a GET per object
// (the cost of a request is in its round trip, authorization and routing),
// so a namespace with a few times more objects than references is still
// read cheaper by a LIST; in a far larger one, the LIST stops, and the rest
// is read one by one.
const listFactor = 16

// group is the references to objects of one protected type in one
// namespace (none for a cluster-scoped type).
type group struct {
	target    index.Source
	namespace string
}

// listTargets reads, with one LIST per namespace, the objects of the
// references refs that are many in one namespace (see listThreshold), and
// calls visit with each reference it found an object for (raw is valid
// during the call only); concurrency LISTs at a time. listed[i] reports
// whether reference i was read this way: then its object was found (and
// visited) or does not exist. The others are left to the caller, to read
// one by one: references that are few in their namespace, those of a
// cluster-scoped dependent that name no namespace (their object may be in
// any), and those a LIST stopped short of (see listFactor).
func listTargets(ctx context.Context, targets Targets, cluster logicalcluster.Name, refs []reference, concurrency int, visit func(i int, raw []byte, m kcp.Meta)) ([]bool, error) {
	listed := make([]bool, len(refs))
	byGroup := map[group]map[string]int{}
	var groups []group
	for i, r := range refs {
		if r.namespace == "" && targets.State(r.target).Namespaced {
			continue
		}
		g := group{target: r.target, namespace: r.namespace}
		if byGroup[g] == nil {
			byGroup[g] = map[string]int{}
			groups = append(groups, g)
		}
		byGroup[g][r.name] = i
	}
	groups = slices.DeleteFunc(groups, func(g group) bool { return len(byGroup[g]) < listThreshold })
	if len(groups) == 0 {
		return listed, nil
	}
	// visit is called from one LIST per group at a time, and each group's
	// references are its own.
	if _, err := each(ctx, len(groups), concurrency, func(ctx context.Context, gi int) error {
		g := groups[gi]
		names := byGroup[g]
		complete, err := targets.ListTargets(ctx, g.target, cluster, g.namespace, listFactor*len(names), func(raw []byte) error {
			m, err := kcp.ReadMeta(raw)
			if err != nil {
				return fmt.Errorf("failed to read %s in the list: %w", g.target.Resource.GroupResource(), err)
			}
			if i, ok := names[m.Name]; ok && !listed[i] {
				listed[i] = true
				visit(i, raw, m)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if complete {
			for _, i := range names {
				listed[i] = true // not in the list: it does not exist
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return listed, nil
}
