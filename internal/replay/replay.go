// Package replay defers deletions: a DELETE of an object that dependents
// still reference, under a rule whose deletion policy is Replay, is refused
// and recorded on the object (Record), and the Replayer deletes the object
// once nothing references it any more, with the propagation policy of the
// original request. The replayed DELETE goes through kcp's admission like
// any other, so the webhook's DELETE check decides it; the Replayer only
// chooses when to try.
//
// The record is the object's deletion-requested label, with the request in
// an annotation: it survives restarts of the webhook, a new leader finds it
// by listing, and removing the label cancels the deletion (the replayed
// DELETE carries the resourceVersion at which the label was seen as a
// precondition).
package replay

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// requestedValue is the value of the deletion-requested label.
const requestedValue = "true"

// Patcher patches protected objects through their provider's virtual
// workspace; *index.Index implements it.
type Patcher interface {
	Patch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) error
}

// Recorder records deferred deletions on objects.
type Recorder struct {
	Patcher Patcher
}

// Record records on obj, an object of src, that its deletion was requested
// as request says: the deletion-requested label and the request as an
// annotation, in one merge patch that carries the object's UID as a
// precondition (a new object of the same name is not marked).
func (r Recorder) Record(ctx context.Context, src index.Source, obj kcp.Meta, request depv1alpha1.DeletionRequest) error {
	raw, err := json.Marshal(request)
	if err != nil {
		return fmt.Errorf("failed to encode the deletion request: %w", err)
	}
	patch := map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{depv1alpha1.LabelDeletionRequested: requestedValue},
		"annotations": map[string]string{depv1alpha1.AnnotationDeletionRequest: string(raw)},
	}}
	if obj.UID != "" {
		patch["metadata"].(map[string]any)["uid"] = obj.UID
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("failed to encode the patch: %w", err)
	}
	if err := r.Patcher.Patch(ctx, src, obj.Cluster, obj.Namespace, obj.Name, types.MergePatchType, body); err != nil {
		return fmt.Errorf("failed to record the deletion request on %s %q: %w", src.Resource.Resource, obj.Name, err)
	}
	return nil
}

// Request returns the deletion request of a DELETE by user, at now, with
// the options of the request (its raw DeleteOptions, which may be empty).
func Request(user string, now metav1.Time, rawOptions []byte) (depv1alpha1.DeletionRequest, error) {
	req := depv1alpha1.DeletionRequest{User: user, RequestedAt: now}
	if len(rawOptions) == 0 {
		return req, nil
	}
	var opts metav1.DeleteOptions
	if err := json.Unmarshal(rawOptions, &opts); err != nil {
		return req, fmt.Errorf("failed to decode the options of the request: %w", err)
	}
	req.PropagationPolicy = opts.PropagationPolicy
	return req, nil
}
