package index

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kcp-dev/logicalcluster/v3"
)

// changeLogSize bounds the changes whose workspaces the index remembers
// (see ChangedClusters): 64 KiB.
const changeLogSize = 4096

// changes counts the changes of the index's contents (see Generation) and
// remembers the workspace of each of the last changeLogSize.
type changes struct {
	// generation counts the changes; it is written under lock, read
	// without it.
	generation atomic.Uint64
	lock       sync.Mutex
	// clusters[g%changeLogSize] is the workspace of the change that made
	// generation g; empty for a change of any workspace.
	clusters [changeLogSize]logicalcluster.Name
}

// record counts a change of the contents of cluster (empty: of any).
func (c *changes) record(cluster logicalcluster.Name) {
	c.lock.Lock()
	defer c.lock.Unlock()
	g := c.generation.Add(1)
	c.clusters[g%changeLogSize] = cluster
}

// since returns the workspaces whose contents changed after generation g,
// each once, in no particular order; ok is false if that is not known: the
// log no longer holds every change since g, one of them was of any
// workspace, or more than most workspaces changed.
func (c *changes) since(g uint64, most int) (clusters []logicalcluster.Name, ok bool) {
	c.lock.Lock()
	defer c.lock.Unlock()
	current := c.generation.Load()
	if g > current || current-g > changeLogSize {
		return nil, false
	}
	for n := g + 1; n <= current; n++ {
		cluster := c.clusters[n%changeLogSize]
		if cluster.Empty() {
			return nil, false
		}
		if !slices.Contains(clusters, cluster) {
			if len(clusters) == most {
				return nil, false
			}
			clusters = append(clusters, cluster)
		}
	}
	return clusters, true
}

// ChangedClusters returns the workspaces in which the index's contents
// changed (see Generation) after generation g, each once: those whose
// dependents came, changed or went, and, while the objects of protected
// types are watched, those in which such an object came. ok is false if
// that is not known, and any workspace may have changed: the index
// remembers only the last 4,096 changes, a complete list of a shard may
// change any workspace, and more than most workspaces changed.
func (ix *Index) ChangedClusters(g uint64, most int) ([]logicalcluster.Name, bool) {
	return ix.changes.since(g, most)
}
