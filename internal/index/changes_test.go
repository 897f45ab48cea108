package index

import (
	"slices"
	"testing"

	"github.com/kcp-dev/logicalcluster/v3"
)

// The index tells which workspaces changed since a generation, as long as
// it remembers every change since then and none of them may have changed
// any workspace.
func TestChangedClusters(t *testing.T) {
	tests := []struct {
		name string
		// before changes in c9 come first; the changes asked about come
		// after the generation they reach (plus since), in the workspaces
		// of record ("" for any).
		before int
		record []logicalcluster.Name
		since  int
		most   int
		want   []logicalcluster.Name
		wantOK bool
	}{
		{name: "nothing changed", most: 4, want: nil, wantOK: true},
		{name: "changes in two workspaces", record: []logicalcluster.Name{"c1", "c2", "c1"}, most: 4, want: []logicalcluster.Name{"c1", "c2"}, wantOK: true},
		{name: "exactly most workspaces", record: []logicalcluster.Name{"c1", "c2"}, most: 2, want: []logicalcluster.Name{"c1", "c2"}, wantOK: true},
		{name: "more than most workspaces", record: []logicalcluster.Name{"c1", "c2", "c3"}, most: 2},
		{name: "a change of any workspace", record: []logicalcluster.Name{"c1", "", "c2"}, most: 4},
		{name: "older changes do not count", before: 10, record: []logicalcluster.Name{"c1"}, most: 4, want: []logicalcluster.Name{"c1"}, wantOK: true},
		{name: "a generation not reached yet", record: []logicalcluster.Name{"c1"}, since: 2, most: 4},
		{name: "every change since is remembered", before: 5, record: slices.Repeat([]logicalcluster.Name{"c1"}, changeLogSize), most: 4, want: []logicalcluster.Name{"c1"}, wantOK: true},
		{name: "more changes since than are remembered", before: 5, record: slices.Repeat([]logicalcluster.Name{"c1"}, changeLogSize+1), most: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c changes
			for range tt.before {
				c.record("c9")
			}
			g := c.generation.Load() + uint64(tt.since)
			for _, cluster := range tt.record {
				c.record(cluster)
			}
			if got := c.generation.Load(); got != uint64(tt.before+len(tt.record)) {
				t.Errorf("generation %d after %d changes", got, tt.before+len(tt.record))
			}
			got, ok := c.since(g, tt.most)
			slices.Sort(got)
			if ok != tt.wantOK || !slices.Equal(got, tt.want) {
				t.Errorf("since(%d) = %v, %v; want %v, %v", g, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
