package references

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

func TestListTargets(t *testing.T) {
	// refs are n references to vpc-0 ... vpc-<n-1> in namespace.
	refs := func(namespace string, n int) []reference {
		out := make([]reference, 0, n)
		for i := range n {
			out = append(out, reference{target: targetSource, namespace: namespace, name: fmt.Sprintf("vpc-%d", i)})
		}
		return out
	}
	// objects are the VPCs vpc-<from> ... vpc-<to-1> in namespace.
	objects := func(namespace string, from, to int) map[string]kcp.Meta {
		out := map[string]kcp.Meta{}
		for i := from; i < to; i++ {
			name := fmt.Sprintf("vpc-%d", i)
			out["consumer|"+namespace+"/"+name] = kcp.Meta{Namespace: namespace, Name: name}
		}
		return out
	}
	merge := func(ms ...map[string]kcp.Meta) map[string]kcp.Meta {
		out := map[string]kcp.Meta{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	clusterScoped := map[index.Source]index.State{targetSource: {Phase: index.PhaseSynced, Namespaced: false}}
	tests := []struct {
		name    string
		refs    []reference
		targets *fakeTargets
		// wantListed and wantVisited count the references read by a LIST,
		// and those of them found.
		wantListed, wantVisited int
		wantCalls               []string
		wantErr                 bool
	}{
		{name: "fewer than listThreshold in a namespace are left to be read one by one",
			refs: refs("default", listThreshold-1), targets: &fakeTargets{objects: objects("default", 0, 100)}},
		{name: "listThreshold in a namespace are read with one LIST",
			refs: refs("default", listThreshold), targets: &fakeTargets{objects: objects("default", 0, listThreshold)},
			wantListed: listThreshold, wantVisited: listThreshold, wantCalls: []string{"consumer vpcs list default"}},
		{name: "those not in a complete LIST do not exist",
			refs: refs("default", 40), targets: &fakeTargets{objects: objects("default", 0, 30)},
			wantListed: 40, wantVisited: 30, wantCalls: []string{"consumer vpcs list default"}},
		{name: "a LIST of a namespace with many more objects stops, the rest is left",
			refs: refs("default", 20), targets: &fakeTargets{objects: objects("default", 100, 1100)},
			wantListed: 0, wantVisited: 0, wantCalls: []string{"consumer vpcs list default"}},
		{name: "one LIST per namespace",
			refs:       append(refs("a", 20), refs("b", 20)...),
			targets:    &fakeTargets{objects: merge(objects("a", 0, 20), objects("b", 0, 20))},
			wantListed: 40, wantVisited: 40, wantCalls: []string{"consumer vpcs list a", "consumer vpcs list b"}},
		{name: "a cluster-scoped dependent's references that name no namespace are left: their objects may be in any",
			refs: refs("", 40), targets: &fakeTargets{objects: objects("default", 0, 40)}},
		{name: "a cluster-scoped type is listed in the cluster",
			refs: refs("", 20), targets: &fakeTargets{objects: objects("", 0, 20), states: clusterScoped},
			wantListed: 20, wantVisited: 20, wantCalls: []string{"consumer vpcs list "}},
		{name: "a LIST that fails fails the read",
			refs: refs("default", 20), targets: &fakeTargets{objects: objects("default", 0, 20), err: errors.New("boom")},
			wantErr: true, wantCalls: []string{"consumer vpcs list default"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				lock    sync.Mutex
				visited []string
			)
			listed, err := listTargets(context.Background(), tt.targets, consumer, tt.refs, 4, func(i int, raw []byte, m kcp.Meta) {
				lock.Lock()
				defer lock.Unlock()
				if m.Name != tt.refs[i].name || len(raw) == 0 {
					t.Errorf("visited %q for the reference to %q", m.Name, tt.refs[i].name)
				}
				visited = append(visited, m.Name)
			})
			if tt.wantErr != (err != nil) {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if got := tt.targets.Calls(); fmt.Sprint(got) != fmt.Sprint(tt.wantCalls) {
				t.Errorf("reads %q, want %q", got, tt.wantCalls)
			}
			if err != nil {
				return
			}
			if n := len(slices.DeleteFunc(slices.Clone(listed), func(b bool) bool { return !b })); n != tt.wantListed {
				t.Errorf("%d references read by a LIST, want %d", n, tt.wantListed)
			}
			if len(visited) != tt.wantVisited {
				t.Errorf("%d found, want %d", len(visited), tt.wantVisited)
			}
		})
	}
}
