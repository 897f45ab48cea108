package objects

import (
	"context"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Reads and writes go at once to the shard known to serve the workspace,
// and find it with a read only where it is not known.
func TestWritesGoToTheShardOfTheCluster(t *testing.T) {
	const obj = `{"metadata":{"name":"vm-1","namespace":"default","uid":"u1"}}`
	serving := func(cluster string) *fakeShard {
		return &fakeShard{clusters: map[string]string{cluster: `{"items":[]}`}, objects: map[string]string{cluster + "/default/vm-1": obj}}
	}
	tests := []struct {
		name string
		// shards serve c1 if the index of the shard is in servers.
		shards  int
		servers []int
		// indexedOn, if not -1, is the shard where dependents of c1 were
		// indexed.
		indexedOn int
		// want are the methods each shard was sent, for a read and two
		// writes.
		want    [][]string
		wantErr func(error) bool
	}{
		{name: "the only shard is written at once", shards: 1, servers: []int{0}, indexedOn: -1,
			want: [][]string{{"GET", "PATCH", "DELETE"}}},
		{name: "the shard where dependents were indexed is written at once", shards: 2, servers: []int{1}, indexedOn: 1,
			want: [][]string{nil, {"GET", "PATCH", "DELETE"}}},
		{name: "an unknown shard is found with a read, once", shards: 2, servers: []int{1}, indexedOn: -1,
			want: [][]string{{"GET"}, {"GET", "PATCH", "DELETE"}}},
		{name: "a workspace no shard serves holds no object", shards: 2, indexedOn: -1,
			want: [][]string{{"GET", "GET", "GET"}, {"GET", "GET", "GET"}}, wantErr: apierrors.IsNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shards := make([]*fakeShard, tt.shards)
			for i := range shards {
				shards[i] = &fakeShard{}
				if slices.Contains(tt.servers, i) {
					shards[i] = serving("c1")
				}
			}
			c := New(newFakeRouter(t, tt.indexedOn, shards...))
			ctx := context.Background()

			raw, getErr := c.Get(ctx, testSource, "c1", "default", "vm-1")
			if getErr == nil && string(raw) != obj {
				t.Errorf("Get = %s, want %s", raw, obj)
			}
			_, patchErr := c.Patch(ctx, testSource, "c1", "default", "vm-1", types.MergePatchType, []byte(`{}`))
			errs := []error{
				getErr,
				patchErr,
				c.Delete(ctx, testSource, "c1", "default", "vm-1", metav1.DeleteOptions{}),
			}
			for _, err := range errs {
				if tt.wantErr == nil && err != nil || tt.wantErr != nil && !tt.wantErr(err) {
					t.Errorf("write: %v", err)
				}
			}
			for i, s := range shards {
				if got := s.requestMethods(); !slices.Equal(got, tt.want[i]) {
					t.Errorf("shard %d was sent %v, want %v", i, got, tt.want[i])
				}
			}
		})
	}
}
