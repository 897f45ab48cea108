package guard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	evanjsonpatch "github.com/evanphx/json-patch/v5"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/objects"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/webhooktest"
)

// provider is the workspace of the VPCs' provider in the tests.
const provider = logicalcluster.Name("provider")

// vpcSource is how the VPCs are read, through their provider's export.
var vpcSource = index.Source{Export: kcp.ObjectKey{Cluster: provider, Name: "network.io"}, Resource: vpcs}

// protectedVPCs finds a rule that protects the provider's VPCs.
type protectedVPCs struct{}

func (protectedVPCs) Find(target registry.Target) []registry.Entry {
	if target == (registry.Target{Cluster: provider, Resource: vpcs.GroupResource()}) {
		return []registry.Entry{{Rule: kcp.ObjectKey{Cluster: provider, Name: "vm-vpcs"}, Target: vpcSource}}
	}
	return nil
}

// fakeReviewer answers SubjectAccessReviews: the users in mayDelete may,
// or every review fails with err; it records what it was asked.
type fakeReviewer struct {
	mayDelete map[string]bool
	err       error
	asked     []authorizationv1.SubjectAccessReviewSpec
	src       index.Source
	cluster   logicalcluster.Name
}

func (f *fakeReviewer) ReviewAccess(_ context.Context, src index.Source, cluster logicalcluster.Name, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	f.asked = append(f.asked, spec)
	f.src, f.cluster = src, cluster
	if f.err != nil {
		return authorizationv1.SubjectAccessReviewStatus{}, f.err
	}
	return authorizationv1.SubjectAccessReviewStatus{Allowed: f.mayDelete[spec.User]}, nil
}

type loaded bool

func (l loaded) Loaded() bool { return bool(l) }

// vpcAnnotated is the JSON of vpc-a in the consumer workspace with
// annotations: null if nil, absent if it is the empty map of absent.
func vpcAnnotated(t *testing.T, annotations map[string]any) []byte {
	t.Helper()
	meta := map[string]any{"name": "vpc-a", "namespace": "default", "labels": nil}
	if annotations != nil {
		a := map[string]any{logicalcluster.AnnotationKey: consumer.String()}
		for k, v := range annotations {
			a[k] = v
		}
		meta["annotations"] = a
	} else {
		// kcp adds the cluster annotation to every object; null
		// annotations reach a webhook only where a mutating webhook
		// before it set them so, and then the object has no cluster.
		meta["annotations"] = nil
	}
	raw, err := json.Marshal(map[string]any{"apiVersion": "network.io/v1", "kind": "VPC", "metadata": meta})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestSkipGuard(t *testing.T) {
	const skip, setBy = depv1alpha1.AnnotationSkipProtection, depv1alpha1.AnnotationSkipProtectionSetBy
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	adminRecord := `{"user":"admin","setAt":"2026-11-26T10:00:00Z"}`
	oldRecord := `{"user":"admin","setAt":"2026-11-01T08:00:00Z"}`
	forged := `{"user":"admin","setAt":"2026-01-01T00:00:00Z"}`
	admin := authenticationv1.UserInfo{Username: "admin", UID: "u-admin", Groups: []string{"system:kcp:admin", "system:authenticated"},
		Extra: map[string]authenticationv1.ExtraValue{"authentication.kcp.io/scopes": {"cluster:consumer"}, warrantExtra: {`{"user":"x"}`}}}
	tenant := authenticationv1.UserInfo{Username: "tenant", Groups: []string{"system:authenticated"}}
	a := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name     string
		op       admissionv1.Operation
		user     authenticationv1.UserInfo
		obj, old map[string]any
		// reviewErr fails every review.
		reviewErr error
		notLoaded bool
		// want are the annotations after the patch (the cluster's aside);
		// nil: unpatched.
		want       map[string]any
		wantCode   int32
		wantAsked  bool
		wantOut    string
		wantWarn   string
		wantAudit  map[string]string
		subresouce string
	}{
		{name: "a CREATE with skip-protection by a user who may delete records the user", op: admissionv1.Create, user: admin,
			obj: a(skip, "true"), want: a(skip, "true", setBy, adminRecord), wantAsked: true, wantOut: SkipEffective,
			wantWarn: "takes effect: it was set by admin, who may delete it", wantAudit: map[string]string{"decision": "effective", "set-by": "admin"}},
		{name: "an UPDATE that sets it, by a user who may delete, records the user", op: admissionv1.Update, user: admin,
			obj: a(skip, "true", "note", "x"), old: a("note", "x"), want: a(skip, "true", "note", "x", setBy, adminRecord), wantAsked: true, wantOut: SkipEffective,
			wantWarn: "takes effect"},
		{name: "an UPDATE from another value to true is a new setting", op: admissionv1.Update, user: admin,
			obj: a(skip, "true"), old: a(skip, "false"), want: a(skip, "true", setBy, adminRecord), wantAsked: true, wantOut: SkipEffective},
		{name: "a user who may delete replaces a record the write carries", op: admissionv1.Update, user: admin,
			obj: a(skip, "true", setBy, forged), old: a(), want: a(skip, "true", setBy, adminRecord), wantAsked: true, wantOut: SkipEffective},
		{name: "a user who may not delete gets no record and a warning that it has no effect", op: admissionv1.Update, user: tenant,
			obj: a(skip, "true"), old: a(), wantAsked: true, wantOut: SkipNoEffect,
			wantWarn:  `has no effect: tenant may not delete it; deletion protection stays`,
			wantAudit: map[string]string{"decision": "no-effect", "set-by": "tenant", "reason": "may-not-delete"}},
		{name: "a user who may not delete loses the record of an earlier setting", op: admissionv1.Update, user: tenant,
			obj: a(skip, "true", setBy, oldRecord), old: a(setBy, oldRecord), want: a(skip, "true"), wantAsked: true, wantOut: SkipNoEffect, wantWarn: "has no effect"},
		{name: "a user who may not delete cannot forge a record", op: admissionv1.Create, user: tenant,
			obj: a(skip, "true", setBy, forged), want: a(skip, "true"), wantAsked: true, wantOut: SkipNoEffect},
		{name: "an UPDATE that keeps skip-protection true is no new setting", op: admissionv1.Update, user: tenant,
			obj: a(skip, "true", setBy, oldRecord, "note", "new"), old: a(skip, "true", setBy, oldRecord)},
		{name: "an UPDATE that keeps it true and forges the record keeps the stored one", op: admissionv1.Update, user: tenant,
			obj: a(skip, "true", setBy, forged), old: a(skip, "true", setBy, oldRecord), want: a(skip, "true", setBy, oldRecord), wantOut: SkipRecordKept,
			wantWarn: "the stored value was kept"},
		{name: "an UPDATE that drops the record (kubectl replace) keeps the stored one", op: admissionv1.Update, user: tenant,
			obj: a(skip, "true"), old: a(skip, "true", setBy, oldRecord), want: a(skip, "true", setBy, oldRecord), wantOut: SkipRecordKept},
		{name: "an UPDATE that sets a record without skip-protection drops it", op: admissionv1.Update, user: tenant,
			obj: a(setBy, forged), old: a(), want: a(), wantOut: SkipRecordKept},
		{name: "a CREATE with a record and no skip-protection gets none", op: admissionv1.Create, user: tenant,
			obj: a(setBy, forged, skip, "false"), want: a(skip, "false"), wantOut: SkipRecordKept},
		{name: "an UPDATE with null annotations keeps the stored record", op: admissionv1.Update, user: tenant,
			obj: nil, old: a(skip, "true", setBy, oldRecord), want: a(setBy, oldRecord), wantOut: SkipRecordKept},
		{name: "removing skip-protection and the record keeps the record, which means nothing without it", op: admissionv1.Update, user: tenant,
			obj: a(), old: a(skip, "true", setBy, oldRecord), want: a(setBy, oldRecord), wantOut: SkipRecordKept},
		{name: "without the claim on subjectaccessreviews the setting has no effect, saying why", op: admissionv1.Update, user: admin,
			obj: a(skip, "true"), old: a(), reviewErr: fmt.Errorf("cannot ask: %w", objects.ErrNoAccessReview), wantAsked: true, wantOut: SkipNoEffect,
			wantWarn:  "cannot ask kcp whether admin may delete it",
			wantAudit: map[string]string{"decision": "no-effect", "set-by": "admin", "reason": "no-access-review"}},
		{name: "a review that ran out of time refuses the write, to be retried", op: admissionv1.Update, user: admin,
			obj: a(skip, "true"), old: a(), reviewErr: fmt.Errorf("asking: %w", context.DeadlineExceeded), wantAsked: true, wantCode: http.StatusServiceUnavailable},
		{name: "a review that kcp answers with 503 until the budget ends refuses the write, to be retried", op: admissionv1.Update, user: admin,
			obj: a(skip, "true"), old: a(), reviewErr: apierrors.NewServiceUnavailable("starting"), wantAsked: true, wantCode: http.StatusServiceUnavailable},
		{name: "a review that fails for a reason that does not clear by itself: no effect, saying why", op: admissionv1.Update, user: admin,
			obj: a(skip, "true"), old: a(), reviewErr: apierrors.NewUnauthorized("bad credentials"), wantAsked: true, wantOut: SkipNoEffect,
			wantWarn: "bad credentials"},
		{name: "while the rules are not loaded, a setting is refused, to be retried", op: admissionv1.Update, user: admin,
			obj: a(skip, "true"), old: a(), notLoaded: true, wantCode: http.StatusServiceUnavailable},
		{name: "a write through the status subresource is not judged", op: admissionv1.Update, user: tenant, subresouce: "status",
			obj: a(skip, "true", setBy, forged), old: a()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reviewer := &fakeReviewer{mayDelete: map[string]bool{"admin": true}, err: tt.reviewErr}
			m := webhook.NewMetrics()
			g := NewSkipGuard(protectedVPCs{}, loaded(!tt.notLoaded), reviewer, m)
			g.now = func() time.Time { return now }
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "req-1", Operation: tt.op, UserInfo: tt.user, SubResource: tt.subresouce, Name: "vpc-a", Namespace: "default",
				Resource: metav1.GroupVersionResource{Group: vpcs.Group, Version: vpcs.Version, Resource: vpcs.Resource},
				Object:   runtime.RawExtension{Raw: vpcAnnotated(t, tt.obj)},
			}}
			if tt.op == admissionv1.Update {
				req.OldObject = runtime.RawExtension{Raw: vpcAnnotated(t, tt.old)}
			}
			ctx := webhook.WithProvider(context.Background(), provider)
			resp := g.Handle(ctx, req)
			if tt.wantCode != 0 {
				if resp.Allowed || resp.Result.Code != tt.wantCode {
					t.Fatalf("allowed %v, result %+v; want refused with %d", resp.Allowed, resp.Result, tt.wantCode)
				}
			} else if !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			if (len(reviewer.asked) > 0) != tt.wantAsked {
				t.Fatalf("asked kcp %d times, want asked: %v", len(reviewer.asked), tt.wantAsked)
			}
			if tt.wantAsked {
				if reviewer.src != vpcSource || reviewer.cluster != consumer {
					t.Errorf("asked through %s in %s, want %s in %s", reviewer.src, reviewer.cluster, vpcSource, consumer)
				}
				want := authorizationv1.SubjectAccessReviewSpec{
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Verb: "delete", Group: vpcs.Group, Version: vpcs.Version, Resource: vpcs.Resource, Name: "vpc-a"},
					User:               tt.user.Username, Groups: tt.user.Groups, UID: tt.user.UID,
				}
				if _, ok := tt.user.Extra["authentication.kcp.io/scopes"]; ok {
					want.Extra = map[string]authorizationv1.ExtraValue{"authentication.kcp.io/scopes": {"cluster:consumer"}}
				}
				if !reflect.DeepEqual(reviewer.asked[0], want) {
					t.Errorf("review %+v, want %+v (the warrant of a write through a virtual workspace left out)", reviewer.asked[0], want)
				}
			}
			if got := annotationsAfter(t, req.Object.Raw, resp); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("annotations after the patch %v, want %v", got, tt.want)
			}
			if tt.wantWarn != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], tt.wantWarn)) {
				t.Errorf("warnings %q, want one containing %q", resp.Warnings, tt.wantWarn)
			}
			for k, v := range tt.wantAudit {
				if resp.AuditAnnotations[k] != v {
					t.Errorf("audit annotations %v, want %s=%s", resp.AuditAnnotations, k, v)
				}
			}
			if tt.wantOut != "" {
				if got, _ := webhooktest.MetricValue(t, m, "dependency_webhook_record_writes_total", "outcome", tt.wantOut); got != 1 {
					t.Errorf("dependency_webhook_record_writes_total{outcome=%q} = %v, want 1", tt.wantOut, got)
				}
			}
		})
	}
}

// annotationsAfter applies the patches of resp to raw and returns the
// annotations but the cluster's; nil if resp has no patch.
func annotationsAfter(t *testing.T, raw []byte, resp admission.Response) map[string]any {
	t.Helper()
	if len(resp.Patches) == 0 {
		return nil
	}
	ops, _ := json.Marshal(resp.Patches)
	patch, err := evanjsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("applying %s: %v", ops, err)
	}
	var got struct {
		Metadata struct {
			Annotations map[string]any `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for k, v := range got.Metadata.Annotations {
		if k != logicalcluster.AnnotationKey {
			out[k] = v
		}
	}
	return out
}
