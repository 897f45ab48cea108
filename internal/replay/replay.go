// Package replay defers deletions: a DELETE of an object that dependents
// still reference, under a rule whose deletion policy is Replay, is refused
// and recorded on the object (Records.Record), and the Replayer deletes the
// object once nothing references it any more, with the propagation policy
// of the original request. The replayed DELETE goes through kcp's admission
// like any other, so the webhook's DELETE check decides it; the Replayer
// only chooses when to try.
//
// The record is the object's deletion-requested label, with the request in
// an annotation, signed by the webhook and bound to the object (package
// records): it survives restarts of the webhook, a new leader finds it by
// listing, and removing the label cancels the deletion (the replayed
// DELETE carries the UID and the resourceVersion at which the record was
// seen as preconditions). A record that does not verify, has expired, or
// that no Replay rule covers any more is never replayed: the Replayer
// removes it, with an Event on the object.
//
// Records and the Replayer read and write objects through their provider's
// virtual workspace (package objects), and learn from the index whether
// dependents still reference them. Metrics counts the replays by result
// and the records removed by reason.
package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/records"
)

// requestedValue is the value of the deletion-requested label.
const requestedValue = "true"

// DefaultTTL is how long a deferred deletion is replayed unless the
// webhook is told otherwise: a stack deleted in one command unwinds in
// seconds to minutes, so a record older than a day belongs to a deletion
// that its dependents have held up far longer than the user waited for; it
// is removed, with an Event, rather than deleting the object by surprise.
const DefaultTTL = 24 * time.Hour

// Patcher patches protected objects through their provider's virtual
// workspace; *objects.Client implements it.
type Patcher interface {
	Patch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) ([]byte, error)
}

// Records writes and verifies the records of deferred deletions.
type Records struct {
	// Patcher writes them.
	Patcher Patcher
	// Keys sign and verify them.
	Keys *records.Keys
	// TTL is how long a record is replayed; 0: DefaultTTL.
	TTL time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// subject is what a record of obj, an object of resource, is bound to.
func subject(resource schema.GroupResource, obj kcp.Meta) records.Subject {
	return records.Subject{Cluster: obj.Cluster, Resource: resource, Namespace: obj.Namespace, Name: obj.Name, UID: obj.UID}
}

func (r *Records) ttl() time.Duration {
	if r.TTL > 0 {
		return r.TTL
	}
	return DefaultTTL
}

func (r *Records) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Verify returns nil if obj, an object of resource, carries the
// deletion-requested label and a record that verifies and has not expired,
// and otherwise why not (a *records.Error for a record that fails).
func (r *Records) Verify(resource schema.GroupResource, obj kcp.Meta) error {
	_, err := r.verify(resource, obj)
	return err
}

func (r *Records) verify(resource schema.GroupResource, obj kcp.Meta) (depv1alpha1.DeletionRequest, error) {
	if !obj.DeletionRequested {
		return depv1alpha1.DeletionRequest{}, &records.Error{Problem: records.ProblemMalformed, Detail: "no " + depv1alpha1.LabelDeletionRequested + " label"}
	}
	return r.Keys.Keyring().Verify(subject(resource, obj), obj.DeletionRecord, r.now(), r.ttl())
}

// Record records on obj, an object of src, that its deletion was requested
// as request says: the deletion-requested label and the signed request as
// an annotation, in one merge patch that carries the object's UID and
// resourceVersion as preconditions, so that nothing is written unless obj
// is exactly the stored object (a new object of the same name, a changed
// one, or one that a forged admission review made up is not recorded).
func (r *Records) Record(ctx context.Context, src index.Source, obj kcp.Meta, request depv1alpha1.DeletionRequest) error {
	if obj.UID == "" || obj.ResourceVersion == "" {
		return fmt.Errorf("%s %q has no UID or resourceVersion to record its deletion for", src.Resource.Resource, obj.Name)
	}
	record, err := r.Keys.Keyring().Encode(subject(src.Resource.GroupResource(), obj), request)
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":             obj.UID,
		"resourceVersion": obj.ResourceVersion,
		"labels":          map[string]string{depv1alpha1.LabelDeletionRequested: requestedValue},
		"annotations":     map[string]string{depv1alpha1.AnnotationDeletionRequest: record},
	}})
	if err != nil {
		return fmt.Errorf("failed to encode the patch: %w", err)
	}
	if _, err := r.Patcher.Patch(ctx, src, obj.Cluster, obj.Namespace, obj.Name, types.MergePatchType, body); err != nil {
		return fmt.Errorf("failed to record the deletion request on %s %q: %w", src.Resource.Resource, obj.Name, err)
	}
	return nil
}

// Remove removes the record from obj, an object of src, if obj is still
// the version that was read (its UID and resourceVersion are preconditions).
func (r *Records) Remove(ctx context.Context, src index.Source, obj kcp.Meta) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":             obj.UID,
		"resourceVersion": obj.ResourceVersion,
		"labels":          map[string]any{depv1alpha1.LabelDeletionRequested: nil},
		"annotations":     map[string]any{depv1alpha1.AnnotationDeletionRequest: nil},
	}})
	if err != nil {
		return fmt.Errorf("failed to encode the patch: %w", err)
	}
	if _, err := r.Patcher.Patch(ctx, src, obj.Cluster, obj.Namespace, obj.Name, types.MergePatchType, body); err != nil {
		return fmt.Errorf("failed to remove the deletion request from %s %q: %w", src.Resource.Resource, obj.Name, err)
	}
	return nil
}
