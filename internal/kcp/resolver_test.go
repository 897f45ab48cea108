package kcp

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"
	corev1alpha1 "github.com/kcp-dev/sdk/apis/core/v1alpha1"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"
)

// fakeWorkspaces serves Workspaces from a map "parent cluster/name" →
// logical cluster of the workspace, and counts lookups.
type fakeWorkspaces struct {
	workspaces map[string]string
	notReady   map[string]bool
	forbidden  map[string]bool
	calls      int
}

func (f *fakeWorkspaces) get(_ context.Context, parent logicalcluster.Name, name string) (*tenancyv1alpha1.Workspace, error) {
	f.calls++
	key := parent.String() + "/" + name
	gr := schema.GroupResource{Group: "tenancy.kcp.io", Resource: "workspaces"}
	if f.forbidden[key] {
		return nil, apierrors.NewForbidden(gr, name, errors.New("access denied"))
	}
	cluster, ok := f.workspaces[key]
	if !ok {
		return nil, apierrors.NewNotFound(gr, name)
	}
	ws := &tenancyv1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	ws.Status.Phase = corev1alpha1.LogicalClusterPhaseReady
	ws.Spec.Cluster = cluster
	if f.notReady[key] {
		ws.Status.Phase = corev1alpha1.LogicalClusterPhaseInitializing
	}
	return ws, nil
}

func newFake() *fakeWorkspaces {
	return &fakeWorkspaces{workspaces: map[string]string{
		"root/net":   "c-net",
		"root/org":   "c-org",
		"c-org/team": "c-team",
		"c-team/net": "c-team-net",
	}}
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(*fakeWorkspaces)
		path    string
		want    string
		wantErr string
	}{
		{name: "root", path: "root", want: "root"},
		{name: "child of root", path: "root:net", want: "c-net"},
		{name: "nested three levels", path: "root:org:team:net", want: "c-team-net"},
		{name: "missing leaf", path: "root:org:team:storage", wantErr: `workspace "storage" does not exist in root:org:team`},
		{name: "missing intermediate", path: "root:nope:team", wantErr: `workspace "nope" does not exist in root`},
		{
			name: "not ready", path: "root:org:team:net",
			setup:   func(f *fakeWorkspaces) { f.notReady = map[string]bool{"c-team/net": true} },
			wantErr: `workspace is not ready (phase "Initializing")`,
		},
		{
			name: "forbidden names the missing permission", path: "root:org:team",
			setup:   func(f *fakeWorkspaces) { f.forbidden = map[string]bool{"c-org/team": true} },
			wantErr: `not allowed to read workspace "team" in root:org`,
		},
		{name: "not under root", path: "system:admin", wantErr: `workspace paths must start with "root"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			if tt.setup != nil {
				tt.setup(f)
			}
			got, err := NewWorkspaceResolver(f.get).Resolve(context.Background(), logicalcluster.NewPath(tt.path))
			if tt.wantErr != "" {
				var rerr *ResolveError
				if !errors.As(err, &rerr) {
					t.Fatalf("Resolve() error = %v, want a *ResolveError", err)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve() error = %q, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve() error = %v", err)
			}
			if got.String() != tt.want {
				t.Errorf("Resolve() = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestResolveCaches(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	r := NewWorkspaceResolver(f.get)

	if _, err := r.Resolve(ctx, logicalcluster.NewPath("root:org:team:net")); err != nil {
		t.Fatal(err)
	}
	if f.calls != 3 {
		t.Fatalf("first resolution made %d lookups, want one per segment (3)", f.calls)
	}
	if _, err := r.Resolve(ctx, logicalcluster.NewPath("root:org:team:net")); err != nil {
		t.Fatal(err)
	}
	if f.calls != 3 {
		t.Fatalf("cached resolution made %d more lookups", f.calls-3)
	}
	// A sibling reuses the cached prefix root:org:team.
	f.workspaces["c-team/storage"] = "c-storage"
	if got, err := r.Resolve(ctx, logicalcluster.NewPath("root:org:team:storage")); err != nil || got != "c-storage" {
		t.Fatalf("Resolve() = %v, %v", got, err)
	}
	if f.calls != 4 {
		t.Fatalf("sibling resolution made %d lookups, want 1", f.calls-3)
	}
}

func TestResolveAfterRecreation(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	r := NewWorkspaceResolver(f.get)
	path := logicalcluster.NewPath("root:org:team:net")
	if _, err := r.Resolve(ctx, path); err != nil {
		t.Fatal(err)
	}

	// root:org:team is deleted and recreated: it gets a new logical cluster.
	// Its old cluster no longer exists, so looking up "net" in it fails; the
	// resolver must walk again from root rather than return an error.
	f.workspaces = map[string]string{
		"root/org":       "c-org",
		"c-org/team":     "c-team2",
		"c-team2/net":    "c-team2-net",
		"c-team2/broken": "",
	}
	r.Invalidate(path) // what the controller does when it notices c-team-net is gone
	got, err := r.Resolve(ctx, path)
	if err != nil || got != "c-team2-net" {
		t.Fatalf("Resolve() after recreation = %v, %v; want c-team2-net", got, err)
	}

	// Without an explicit invalidation, a lookup that fails below a stale
	// cached prefix retries from root.
	f.workspaces["c-team2/storage"] = "c-storage2"
	r2 := NewWorkspaceResolver(f.get)
	r2.cache["root:org:team"] = "c-team" // stale entry
	got, err = r2.Resolve(ctx, logicalcluster.NewPath("root:org:team:storage"))
	if err != nil || got != "c-storage2" {
		t.Fatalf("Resolve() below a stale prefix = %v, %v; want c-storage2", got, err)
	}
	if cached, _ := r2.cached(logicalcluster.NewPath("root:org:team")); cached != "c-team2" {
		t.Errorf("stale prefix not replaced: %s", cached)
	}

	r2.InvalidateAll()
	if _, ok := r2.cached(logicalcluster.NewPath("root:org:team")); ok {
		t.Errorf("InvalidateAll() kept entries")
	}
}
