package guard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// Self tells whether a user is the webhook itself.
type Self = webhook.Self

// clusterNameExtras are the keys of the extra of a user that name the
// logical cluster of a service account: a service account of the same
// namespace and name in another workspace has the same user name.
var clusterNameExtras = []string{"authentication.kubernetes.io/cluster-name", "authentication.kcp.io/cluster-name"}

// SelfReview is the webhook's identity as kcp authenticates its
// credentials, learned with a SelfSubjectReview when it is first needed (and
// again until that succeeds).
type SelfReview struct {
	review func(ctx context.Context) (authenticationv1.UserInfo, error)

	lock sync.Mutex
	self *authenticationv1.UserInfo
}

// NewSelfReview returns the identity of the credentials of cfg.
func NewSelfReview(cfg *rest.Config) *SelfReview {
	return &SelfReview{review: func(ctx context.Context) (authenticationv1.UserInfo, error) {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return authenticationv1.UserInfo{}, err
		}
		r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return authenticationv1.UserInfo{}, fmt.Errorf("failed to learn the webhook's own user: %w", err)
		}
		return r.Status.UserInfo, nil
	}}
}

// StaticSelf returns the identity user.
func StaticSelf(user authenticationv1.UserInfo) *SelfReview {
	return &SelfReview{self: &user}
}

// Identity returns the webhook's identity.
func (s *SelfReview) Identity(ctx context.Context) (authenticationv1.UserInfo, error) {
	s.lock.Lock()
	defer s.lock.Unlock()
	if s.self == nil {
		u, err := s.review(ctx)
		if err != nil {
			return u, err
		}
		if u.Username == "" {
			return u, fmt.Errorf("kcp authenticates the webhook's credentials as no user")
		}
		s.self = &u
	}
	return *s.self, nil
}

// Is implements Self: the user names are equal, and so are the logical
// clusters of a service account.
func (s *SelfReview) Is(ctx context.Context, user authenticationv1.UserInfo) (bool, error) {
	self, err := s.Identity(ctx)
	if err != nil {
		return false, err
	}
	if user.Username != self.Username {
		return false, nil
	}
	for _, k := range clusterNameExtras {
		if want, ok := self.Extra[k]; ok && !slices.Equal(want, user.Extra[k]) {
			return false, nil
		}
	}
	return true, nil
}

// Outcomes of the RecordGuard, the values of the outcome label of
// dependency_webhook_record_writes_total.
const (
	// RecordWriteAllowed: the webhook wrote its own record, or nothing
	// managed changed.
	RecordWriteAllowed = "allowed"
	// RecordWriteDenied: someone else set or changed a record.
	RecordWriteDenied = "denied"
)

// recordKeys are the keys of a record: a label and an annotation.
var recordKeys = []struct {
	field, key string
}{{"labels", depv1alpha1.LabelDeletionRequested}, {"annotations", depv1alpha1.AnnotationDeletionRequest}}

// RecordGuard is the admission.Handler that kcp calls for CREATE and
// UPDATE of protected objects that set the deletion-requested label or the
// deletion-request annotation, or change their value: only the webhook
// itself may write them. Removing them (which cancels a deferred deletion)
// and an UPDATE that keeps their values (re-applying an exported object) do
// not reach it (the configuration's match condition), and are allowed if
// they do.
type RecordGuard struct {
	self    Self
	metrics *webhook.Metrics
}

// NewRecordGuard returns a guard that lets self write records.
func NewRecordGuard(self Self, metrics *webhook.Metrics) *RecordGuard {
	return &RecordGuard{self: self, metrics: metrics}
}

// Handle implements admission.Handler.
func (g *RecordGuard) Handle(ctx context.Context, req admission.Request) admission.Response {
	resp := g.handle(ctx, req)
	outcome := RecordWriteAllowed
	if !resp.Allowed {
		outcome = RecordWriteDenied
	}
	g.metrics.RecordWrite(outcome)
	return resp
}

func (g *RecordGuard) handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update || req.SubResource != "" {
		return admission.Allowed("")
	}
	type metadata struct {
		Metadata struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	var obj, old metadata
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("failed to decode the object's metadata: %w", err))
	}
	if req.Operation == admissionv1.Update {
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("failed to decode the old object's metadata: %w", err))
		}
	}
	field := func(m metadata, field string) map[string]string {
		if field == "labels" {
			return m.Metadata.Labels
		}
		return m.Metadata.Annotations
	}
	var changed []string
	for _, k := range recordKeys {
		v, set := field(obj, k.field)[k.key]
		before, was := field(old, k.field)[k.key]
		if set && (!was || before != v) {
			changed = append(changed, fmt.Sprintf("the %s %s", strings.TrimSuffix(k.field, "s"), k.key))
		}
	}
	if len(changed) == 0 {
		return admission.Allowed("")
	}
	ctx, cancel := webhook.WithBudget(ctx, 0)
	defer cancel()
	self, err := g.self.Is(ctx, req.UserInfo)
	if err != nil {
		log.FromContext(ctx).Error(err, "Cannot tell whether a write of a record is the webhook's own")
		return webhook.Unavailable(fmt.Sprintf("could not check who may write %s (%v); retry", strings.Join(changed, " and "), err))
	}
	if self {
		return admission.Allowed("")
	}
	resp := admission.Denied(fmt.Sprintf("%s %s managed by the dependency webhook, which records deferred deletions there; "+
		"nobody else may set or change %s (remove %s from the manifest; removing the label from an object cancels its deferred deletion)",
		strings.Join(changed, " and "), isAre(len(changed)), itThem(len(changed)), itThem(len(changed))))
	resp.AuditAnnotations = map[string]string{webhook.AuditDecision: webhook.DecisionDenied}
	return resp
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func itThem(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}
