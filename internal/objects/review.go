package objects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/index/route"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// ErrNoAccessReview is what ReviewAccess fails with (wrapped) when kcp does
// not answer the review for a reason that does not clear by itself: every
// shard's virtual workspace refuses it (the provider's APIExport does not
// claim subjectaccessreviews, the workspace has not accepted the claim, or
// the provider has not granted the webhook create on its APIExport's
// content), the virtual workspace does not serve them, or the webhook
// cannot read the provider's APIExport.
var ErrNoAccessReview = errors.New("kcp refused the SubjectAccessReview")

// ReviewAccess asks kcp whether a user may do what spec says in cluster,
// with a SubjectAccessReview in that workspace, through the virtual
// workspace of src (a protected resource) on the shard that serves it:
// kcp's APIExport virtual workspace serves subjectaccessreviews of the
// workspaces that accepted the export's claim on them, and the workspace
// answers as it authorizes the user's own requests. It returns the
// review's status, and an error wrapping ErrNoAccessReview when no shard
// answered.
func (c *Client) ReviewAccess(ctx context.Context, src index.Source, cluster logicalcluster.Name, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	body, err := json.Marshal(authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: authorizationv1.SchemeGroupVersion.String(), Kind: "SubjectAccessReview"},
		Spec:     spec,
	})
	if err != nil {
		return authorizationv1.SubjectAccessReviewStatus{}, fmt.Errorf("failed to encode the SubjectAccessReview: %w", err)
	}
	path := []string{cluster.Path().RequestPath(), "apis", authorizationv1.GroupName, "v1", "subjectaccessreviews"}
	var review authorizationv1.SubjectAccessReview
	answered := false
	err = c.router.Retry(ctx, func() error {
		err := c.router.OnShardOf(src, cluster, func(shard *vw.Client, _ index.State) error {
			raw, err := shard.Post(ctx, path, body)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(raw, &review); err != nil {
				return fmt.Errorf("failed to decode the SubjectAccessReview kcp answered: %w", err)
			}
			answered = true
			return nil
		})
		switch {
		case errors.Is(err, route.ErrNotInspected):
			// Once the webhook is ready it has read every export it may:
			// the provider has not granted it to.
			return fmt.Errorf("%w: the webhook cannot read the APIExport %s (has its provider granted the webhook get on apiexportendpointslices?): %w", ErrNoAccessReview, src.Export, err)
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: the virtual workspace of the APIExport %s serves no subjectaccessreviews in logical cluster %s (does the export claim them?): %w", ErrNoAccessReview, src.Export, cluster, err)
		}
		return err
	})
	if err == nil && !answered {
		err = fmt.Errorf("%w in logical cluster %s: does the APIExport %s claim subjectaccessreviews, has the workspace accepted the claim, and has its provider granted the webhook create on apiexports/content?",
			ErrNoAccessReview, cluster, src.Export)
	}
	if err != nil {
		return authorizationv1.SubjectAccessReviewStatus{}, fmt.Errorf("cannot ask kcp whether %s may %s %s: %w", spec.User, spec.ResourceAttributes.Verb, src.Resource.GroupResource(), err)
	}
	return review.Status, nil
}
