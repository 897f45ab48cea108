package teardown

import (
	"context"
	"fmt"
	"time"
)

// WorkspaceNamespace is the namespace whose deletion tells that the whole
// workspace is being deleted: kcp's WorkspaceNamespaceLifecycle admission
// refuses to delete it (like kube-system and kube-public) unless the
// workspace's LogicalCluster is being deleted, and the deletion of a
// LogicalCluster deletes every namespace and every APIBinding of the
// workspace, and so, through their deletions, every object of a bound
// resource.
const WorkspaceNamespace = "default"

// Probe reports whether a namespace of a workspace is being deleted, as
// kcp says (see objects.Client.NamespaceTerminating).
type Probe func(ctx context.Context, namespace string) (bool, error)

// Scope tells, for one decision, which objects of a workspace a teardown
// under way deletes, asking the probe about each namespace once. kcp's
// namespace controller deletes every namespaced object of a namespace being
// deleted, of every resource the workspace serves (bound resources
// included); the deletion of a workspace deletes all namespaces, and all
// APIBindings, whose deletion deletes every object of their resources. An
// APIBinding's deletion deletes the objects of its own resources only, and
// cannot be told apart here: no object is taken to be deleted by it.
type Scope struct {
	// Begun is a moment by which the teardown of the item being decided
	// had begun: when its first item reached the webhook. The index
	// proves that it holds every dependent that existed then (see
	// index.Index.Fenced).
	Begun time.Time

	probe   Probe
	answers map[string]answer
}

type answer struct {
	terminating bool
	err         error
}

// NewScope returns a scope that asks probe; a nil probe knows of no
// namespace being deleted.
func NewScope(probe Probe) *Scope {
	return &Scope{probe: probe, answers: map[string]answer{}}
}

// Terminating reports whether namespace is being deleted: kcp then creates
// nothing in it.
func (s *Scope) Terminating(ctx context.Context, namespace string) (bool, error) {
	if a, ok := s.answers[namespace]; ok {
		return a.terminating, a.err
	}
	var a answer
	if s.probe == nil {
		a.err = fmt.Errorf("the webhook does not ask whether namespaces are being deleted")
	} else {
		a.terminating, a.err = s.probe(ctx, namespace)
	}
	s.answers[namespace] = a
	return a.terminating, a.err
}

// WorkspaceDeleted reports whether the workspace is being deleted: its
// namespace WorkspaceNamespace is.
func (s *Scope) WorkspaceDeleted(ctx context.Context) bool {
	deleted, _ := s.Terminating(ctx, WorkspaceNamespace)
	return deleted
}

// Answered reports whether the probe could tell whether the objects in
// namespace (cluster-scoped ones if it is empty) are being deleted.
func (s *Scope) Answered(ctx context.Context, namespace string) bool {
	if namespace == "" {
		namespace = WorkspaceNamespace
	}
	_, err := s.Terminating(ctx, namespace)
	return err == nil
}

// Deletes reports whether a teardown under way deletes the objects in
// namespace (cluster-scoped ones if it is empty), and if not, why not.
func (s *Scope) Deletes(ctx context.Context, namespace string) (bool, string) {
	if namespace == "" {
		deleted, err := s.Terminating(ctx, WorkspaceNamespace)
		switch {
		case deleted:
			return true, ""
		case err != nil:
			return false, fmt.Sprintf("a cluster-scoped object is deleted with its workspace, and it cannot be told whether the workspace is being deleted: %v", err)
		}
		return false, "a cluster-scoped object is deleted with its workspace, which is not being deleted"
	}
	terminating, err := s.Terminating(ctx, namespace)
	if terminating || s.WorkspaceDeleted(ctx) {
		return true, ""
	}
	if err != nil {
		return false, fmt.Sprintf("it cannot be told whether namespace %q is being deleted: %v", namespace, err)
	}
	return false, fmt.Sprintf("namespace %q is not being deleted", namespace)
}

// Name names the teardown that an item in namespace (empty for a
// cluster-scoped object) is part of, if it can be told: the deletion of
// its namespace or of the workspace. It cannot for an APIBinding's
// deletion.
func (s *Scope) Name(ctx context.Context, namespace string) (string, bool) {
	if namespace != "" {
		if terminating, _ := s.Terminating(ctx, namespace); terminating {
			return fmt.Sprintf("the deletion of namespace %q", namespace), true
		}
	}
	if s.WorkspaceDeleted(ctx) {
		return "the workspace's deletion", true
	}
	return "", false
}
