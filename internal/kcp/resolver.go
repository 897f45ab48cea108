package kcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/sdk/apis/core"
	corev1alpha1 "github.com/kcp-dev/sdk/apis/core/v1alpha1"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"
)

// WorkspaceGetter reads the Workspace object name in the logical cluster
// parent.
type WorkspaceGetter func(ctx context.Context, parent logicalcluster.Name, name string) (*tenancyv1alpha1.Workspace, error)

// ClientWorkspaceGetter returns a WorkspaceGetter that reads Workspaces with
// clients from clients (usually pointing at the front-proxy).
func ClientWorkspaceGetter(clients *ClusterClients) WorkspaceGetter {
	return func(ctx context.Context, parent logicalcluster.Name, name string) (*tenancyv1alpha1.Workspace, error) {
		c, err := clients.Cluster(parent.Path())
		if err != nil {
			return nil, err
		}
		ws := &tenancyv1alpha1.Workspace{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ws); err != nil {
			return nil, err
		}
		return ws, nil
	}
}

// ResolveError explains why a workspace path could not be resolved.
type ResolveError struct {
	// Path is the workspace path that was resolved.
	Path logicalcluster.Path
	// Failed is the prefix of Path that could not be resolved.
	Failed logicalcluster.Path
	// Err is the underlying error.
	Err error
}

func (e *ResolveError) Error() string {
	parent, name := e.Failed.Split()
	switch {
	case apierrors.IsNotFound(e.Err):
		return fmt.Sprintf("workspace %q does not exist in %s", name, parent)
	case apierrors.IsForbidden(e.Err):
		return fmt.Sprintf("not allowed to read workspace %q in %s (the controller needs get on workspaces and access to %s): %v", name, parent, parent, e.Err)
	case e.Failed.Equal(e.Path):
		return fmt.Sprintf("failed to resolve workspace %s: %v", e.Path, e.Err)
	default:
		return fmt.Sprintf("failed to resolve workspace %s (at %s): %v", e.Path, e.Failed, e.Err)
	}
}

func (e *ResolveError) Unwrap() error {
	return e.Err
}

// errNotReady is returned for a workspace that has no logical cluster yet.
var errNotReady = errors.New("workspace is not ready")

// WorkspaceResolver resolves workspace paths such as root:org:team:network to
// the names of their logical clusters. It walks the path one segment at a
// time, reading each Workspace in its parent's logical cluster, so paths of
// any depth resolve, and caches what it learns for every prefix. A failed
// lookup drops the cached prefixes of the path and walks again from root
// once, so a workspace that was deleted and recreated is found under its new
// logical cluster. Callers that notice that a resolved cluster no longer
// exists call Invalidate.
type WorkspaceResolver struct {
	get WorkspaceGetter

	lock  sync.RWMutex
	cache map[string]logicalcluster.Name
}

// NewWorkspaceResolver returns a resolver that reads Workspaces with get.
func NewWorkspaceResolver(get WorkspaceGetter) *WorkspaceResolver {
	return &WorkspaceResolver{get: get, cache: map[string]logicalcluster.Name{}}
}

// Resolve returns the logical cluster name of the workspace at path. Errors
// are of type *ResolveError.
func (r *WorkspaceResolver) Resolve(ctx context.Context, path logicalcluster.Path) (logicalcluster.Name, error) {
	if name, ok := r.cached(path); ok {
		return name, nil
	}
	name, err := r.walk(ctx, path, true)
	if err == nil {
		return name, nil
	}
	// Something on the way may have been recreated: forget and retry once.
	r.Invalidate(path)
	return r.walk(ctx, path, false)
}

// Invalidate forgets what the resolver cached for path and all its prefixes
// except root.
func (r *WorkspaceResolver) Invalidate(path logicalcluster.Path) {
	r.lock.Lock()
	defer r.lock.Unlock()
	segments := splitPath(path)
	for i := range segments {
		delete(r.cache, joinPath(segments[:i+1]))
	}
}

// InvalidateAll forgets everything the resolver cached.
func (r *WorkspaceResolver) InvalidateAll() {
	r.lock.Lock()
	defer r.lock.Unlock()
	clear(r.cache)
}

func (r *WorkspaceResolver) cached(path logicalcluster.Path) (logicalcluster.Name, bool) {
	if path.Equal(core.RootCluster.Path()) {
		return core.RootCluster, true
	}
	r.lock.RLock()
	defer r.lock.RUnlock()
	name, ok := r.cache[path.String()]
	return name, ok
}

// walk resolves path from its longest cached prefix (or from root when
// useCache is false), caching every prefix it resolves.
func (r *WorkspaceResolver) walk(ctx context.Context, path logicalcluster.Path, useCache bool) (logicalcluster.Name, error) {
	segments := splitPath(path)
	if len(segments) == 0 || segments[0] != core.RootCluster.String() {
		return "", &ResolveError{Path: path, Failed: path, Err: fmt.Errorf("workspace paths must start with %q", core.RootCluster)}
	}

	// Find the longest cached prefix to start from.
	start, parent := 1, core.RootCluster
	if useCache {
		for i := len(segments); i > 1; i-- {
			if name, ok := r.cached(logicalcluster.NewPath(joinPath(segments[:i]))); ok {
				start, parent = i, name
				break
			}
		}
	}

	for i := start; i < len(segments); i++ {
		prefix := logicalcluster.NewPath(joinPath(segments[:i+1]))
		ws, err := r.get(ctx, parent, segments[i])
		if err == nil && ws.Spec.Cluster == "" {
			err = fmt.Errorf("%w (phase %q)", errNotReady, ws.Status.Phase)
		}
		if err == nil && ws.Status.Phase != corev1alpha1.LogicalClusterPhaseReady {
			err = fmt.Errorf("%w (phase %q)", errNotReady, ws.Status.Phase)
		}
		if err != nil {
			return "", &ResolveError{Path: path, Failed: prefix, Err: err}
		}
		parent = logicalcluster.Name(ws.Spec.Cluster)
		r.lock.Lock()
		r.cache[prefix.String()] = parent
		r.lock.Unlock()
	}
	return parent, nil
}

func splitPath(p logicalcluster.Path) []string {
	if p.Empty() {
		return nil
	}
	return strings.Split(p.String(), ":")
}

func joinPath(segments []string) string {
	return strings.Join(segments, ":")
}
