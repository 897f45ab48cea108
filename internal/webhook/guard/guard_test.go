package guard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/webhooktest"
)

var vpcs = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}

// consumer is the workspace the tests' objects live in.
const consumer = logicalcluster.Name("consumer")

// webhookUser is the webhook's own identity in the tests.
const webhookUser = "dependency-webhook"

// recordMeta is the metadata of a VPC with the record keys given: label
// and annotation are the values of the deletion-requested label and the
// deletion-request annotation, not set if nil.
type recordMeta struct {
	label, annotation *string
}

func str(s string) *string { return &s }

// vpcWith is the JSON of vpc-a in the consumer workspace carrying m, and
// an unrelated label and annotation.
func vpcWith(t *testing.T, m recordMeta) []byte {
	t.Helper()
	labels := map[string]any{"app": "web"}
	annotations := map[string]any{logicalcluster.AnnotationKey: consumer.String(), "note": "x"}
	if m.label != nil {
		labels[depv1alpha1.LabelDeletionRequested] = *m.label
	}
	if m.annotation != nil {
		annotations[depv1alpha1.AnnotationDeletionRequest] = *m.annotation
	}
	raw, err := json.Marshal(map[string]any{
		"apiVersion": "network.io/v1", "kind": "VPC",
		"metadata": map[string]any{"name": "vpc-a", "namespace": "default", "labels": labels, "annotations": annotations},
		"spec":     map[string]any{"cidr": "10.0.0.0/16"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// recordWrite is a CREATE (old nil) or UPDATE of vpc-a by user.
func recordWrite(t *testing.T, user authenticationv1.UserInfo, obj recordMeta, old *recordMeta) admission.Request {
	t.Helper()
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "req-1",
		Operation: admissionv1.Create,
		Resource:  metav1.GroupVersionResource{Group: vpcs.Group, Version: vpcs.Version, Resource: vpcs.Resource},
		Name:      "vpc-a", Namespace: "default",
		UserInfo: user,
		Object:   runtime.RawExtension{Raw: vpcWith(t, obj)},
	}}
	if old != nil {
		req.Operation = admissionv1.Update
		req.OldObject = runtime.RawExtension{Raw: vpcWith(t, *old)}
	}
	return req
}

// countingSelf is a Self that counts its calls.
type countingSelf struct {
	Self
	calls int
}

func (c *countingSelf) Is(ctx context.Context, user authenticationv1.UserInfo) (bool, error) {
	c.calls++
	return c.Self.Is(ctx, user)
}

func TestRecordGuard(t *testing.T) {
	alice := authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}
	self := authenticationv1.UserInfo{Username: webhookUser, Groups: []string{"system:authenticated"}}
	const label, annotation = depv1alpha1.LabelDeletionRequested, depv1alpha1.AnnotationDeletionRequest
	none := recordMeta{}
	both := recordMeta{label: str("true"), annotation: str(`{"signed":"record"}`)}
	onlyLabel := recordMeta{label: str("true")}
	onlyAnnotation := recordMeta{annotation: str(`{"signed":"record"}`)}

	tests := []struct {
		name string
		req  admission.Request
		// self is the webhook's identity; webhookUser without extra if
		// unset.
		self        *authenticationv1.UserInfo
		wantAllowed bool
		wantMessage []string
		wantNot     []string
		// wantAsked is whether the guard asked whether the user is the
		// webhook.
		wantAsked bool
	}{
		{
			name:        "a user who sets the label on CREATE is refused, naming it",
			req:         recordWrite(t, alice, onlyLabel, nil),
			wantMessage: []string{"the label " + label + " is managed by the dependency webhook", "nobody else may set or change it", "remove it from the manifest"},
			wantNot:     []string{"the annotation"},
			wantAsked:   true,
		},
		{
			name:        "a user who sets the annotation on CREATE is refused, naming it",
			req:         recordWrite(t, alice, onlyAnnotation, nil),
			wantMessage: []string{"the annotation " + annotation + " is managed by the dependency webhook", "remove it from the manifest"},
			wantNot:     []string{"the label " + label},
			wantAsked:   true,
		},
		{
			name:        "a user who sets both is refused, naming both",
			req:         recordWrite(t, alice, both, nil),
			wantMessage: []string{"the label " + label + " and the annotation " + annotation + " are managed by the dependency webhook", "remove them from the manifest"},
			wantAsked:   true,
		},
		{
			name:        "a user who adds the label on UPDATE is refused",
			req:         recordWrite(t, alice, onlyLabel, &none),
			wantMessage: []string{"the label " + label, "dependency webhook", "remove it from the manifest"},
			wantAsked:   true,
		},
		{
			name:        "a user who adds the annotation on UPDATE, keeping the label, is refused for the annotation only",
			req:         recordWrite(t, alice, both, &onlyLabel),
			wantMessage: []string{"the annotation " + annotation + " is managed"},
			wantNot:     []string{"the label " + label},
			wantAsked:   true,
		},
		{
			name:        "a user who changes the label's value is refused",
			req:         recordWrite(t, alice, recordMeta{label: str("yes"), annotation: both.annotation}, &both),
			wantMessage: []string{"the label " + label + " is managed"},
			wantNot:     []string{"the annotation"},
			wantAsked:   true,
		},
		{
			name:        "a user who changes the annotation's value is refused",
			req:         recordWrite(t, alice, recordMeta{label: both.label, annotation: str(`{"user":"mallory"}`)}, &both),
			wantMessage: []string{"the annotation " + annotation + " is managed"},
			wantAsked:   true,
		},
		{
			name:        "a user who empties the label's value is refused",
			req:         recordWrite(t, alice, recordMeta{label: str(""), annotation: both.annotation}, &both),
			wantMessage: []string{"the label " + label},
			wantAsked:   true,
		},
		{
			name:        "a user who removes both (cancelling a deferred deletion) is allowed",
			req:         recordWrite(t, alice, none, &both),
			wantAllowed: true,
		},
		{
			name:        "a user who removes the label only is allowed",
			req:         recordWrite(t, alice, onlyAnnotation, &both),
			wantAllowed: true,
		},
		{
			name:        "a user who removes the annotation only is allowed",
			req:         recordWrite(t, alice, onlyLabel, &both),
			wantAllowed: true,
		},
		{
			name:        "an UPDATE that keeps both values (kubectl replace of an exported object) is allowed",
			req:         recordWrite(t, alice, both, &both),
			wantAllowed: true,
		},
		{
			name:        "writes without records are allowed",
			req:         recordWrite(t, alice, none, nil),
			wantAllowed: true,
		},
		{
			name:        "the webhook sets both",
			req:         recordWrite(t, self, both, &none),
			wantAllowed: true,
			wantAsked:   true,
		},
		{
			name:        "the webhook changes the annotation",
			req:         recordWrite(t, self, recordMeta{label: both.label, annotation: str(`{"new":"record"}`)}, &both),
			wantAllowed: true,
			wantAsked:   true,
		},
		{
			name: "a service account of the webhook's name in another workspace is refused",
			req: recordWrite(t, authenticationv1.UserInfo{Username: webhookUser, Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/cluster-name": {"root:attacker"},
			}}, both, nil),
			self: &authenticationv1.UserInfo{Username: webhookUser, Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/cluster-name": {"root:dependencies"},
			}},
			wantMessage: []string{"managed by the dependency webhook"},
			wantAsked:   true,
		},
		{
			name: "a user of the webhook's name without the workspace is refused when the webhook has one",
			req:  recordWrite(t, authenticationv1.UserInfo{Username: webhookUser}, both, nil),
			self: &authenticationv1.UserInfo{Username: webhookUser, Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/cluster-name": {"root:dependencies"},
			}},
			wantMessage: []string{"managed by the dependency webhook"},
			wantAsked:   true,
		},
		{
			name: "kcp's name of the workspace counts too",
			req: recordWrite(t, authenticationv1.UserInfo{Username: webhookUser, Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/cluster-name": {"root:dependencies"},
				"authentication.kcp.io/cluster-name":        {"root:attacker"},
			}}, both, nil),
			self: &authenticationv1.UserInfo{Username: webhookUser, Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/cluster-name": {"root:dependencies"},
				"authentication.kcp.io/cluster-name":        {"root:dependencies"},
			}},
			wantMessage: []string{"managed by the dependency webhook"},
			wantAsked:   true,
		},
		{
			name: "the webhook's service account in its own workspace is allowed",
			req: recordWrite(t, authenticationv1.UserInfo{Username: webhookUser, Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/cluster-name": {"root:dependencies"},
				"other": {"anything"},
			}}, both, nil),
			self: &authenticationv1.UserInfo{Username: webhookUser, Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/cluster-name": {"root:dependencies"},
			}},
			wantAllowed: true,
			wantAsked:   true,
		},
		{
			name: "a webhook identity without a workspace accepts its name whatever the extra says",
			req: recordWrite(t, authenticationv1.UserInfo{Username: webhookUser, Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/cluster-name": {"root:somewhere"},
			}}, both, nil),
			wantAllowed: true,
			wantAsked:   true,
		},
		{
			name: "a write of a subresource is allowed without asking",
			req: func() admission.Request {
				r := recordWrite(t, alice, both, &none)
				r.SubResource = "status"
				return r
			}(),
			wantAllowed: true,
		},
		{
			name: "a DELETE is allowed without asking",
			req: func() admission.Request {
				r := recordWrite(t, alice, both, nil)
				r.Operation = admissionv1.Delete
				r.OldObject, r.Object = r.Object, runtime.RawExtension{}
				return r
			}(),
			wantAllowed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			identity := authenticationv1.UserInfo{Username: webhookUser}
			if tt.self != nil {
				identity = *tt.self
			}
			s := &countingSelf{Self: StaticSelf(identity)}
			m := webhook.NewMetrics()
			g := NewRecordGuard(s, m)
			resp := g.Handle(context.Background(), tt.req)
			if resp.Allowed != tt.wantAllowed {
				t.Fatalf("allowed = %v, want %v (result %+v)", resp.Allowed, tt.wantAllowed, resp.Result)
			}
			if (s.calls > 0) != tt.wantAsked {
				t.Errorf("asked whether the user is the webhook %d times, want asked: %v", s.calls, tt.wantAsked)
			}
			outcome := RecordWriteAllowed
			if !tt.wantAllowed {
				outcome = RecordWriteDenied
				if resp.Result.Code != http.StatusForbidden {
					t.Errorf("code = %d, want 403", resp.Result.Code)
				}
				if got := resp.AuditAnnotations[webhook.AuditDecision]; got != webhook.DecisionDenied {
					t.Errorf("audit %s = %q, want %q", webhook.AuditDecision, got, webhook.DecisionDenied)
				}
			}
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			for _, want := range tt.wantMessage {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not contain %q", msg, want)
				}
			}
			for _, not := range tt.wantNot {
				if strings.Contains(msg, not) {
					t.Errorf("message %q contains %q", msg, not)
				}
			}
			got, n := webhooktest.MetricValue(t, m, "dependency_webhook_record_writes_total", "outcome", outcome)
			if got != 1 {
				t.Errorf("dependency_webhook_record_writes_total{outcome=%q} = %v, want 1", outcome, got)
			}
			if n != 1 {
				t.Errorf("dependency_webhook_record_writes_total has %d series, want one", n)
			}
		})
	}
}

// A malformed object or old object is a bad request.
func TestRecordGuardRefusesMalformedObjects(t *testing.T) {
	alice := authenticationv1.UserInfo{Username: "alice"}
	set := recordMeta{label: str("true")}
	tests := []struct {
		name        string
		req         admission.Request
		wantMessage string
	}{
		{
			name: "object",
			req: func() admission.Request {
				r := recordWrite(t, alice, set, nil)
				r.Object.Raw = []byte(`{"metadata": [`)
				return r
			}(),
			wantMessage: "failed to decode the object's metadata",
		},
		{
			name: "labels that are not strings",
			req: func() admission.Request {
				r := recordWrite(t, alice, set, nil)
				r.Object.Raw = []byte(`{"metadata":{"labels":{"` + depv1alpha1.LabelDeletionRequested + `":true}}}`)
				return r
			}(),
			wantMessage: "failed to decode the object's metadata",
		},
		{
			name: "old object",
			req: func() admission.Request {
				r := recordWrite(t, alice, set, &recordMeta{})
				r.OldObject.Raw = []byte(`not json`)
				return r
			}(),
			wantMessage: "failed to decode the old object's metadata",
		},
		{
			name: "an UPDATE without an old object",
			req: func() admission.Request {
				r := recordWrite(t, alice, set, &recordMeta{})
				r.OldObject.Raw = nil
				return r
			}(),
			wantMessage: "old object",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &countingSelf{Self: StaticSelf(authenticationv1.UserInfo{Username: webhookUser})}
			resp := NewRecordGuard(s, nil).Handle(context.Background(), tt.req)
			if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusBadRequest || !strings.Contains(resp.Result.Message, tt.wantMessage) {
				t.Errorf("response %+v, want 400 with %q", resp.Result, tt.wantMessage)
			}
			if s.calls != 0 {
				t.Errorf("asked whether the user is the webhook for a malformed request")
			}
		})
	}
}

// Null, absent and empty labels and annotations (a server-side apply can
// leave them null) are objects without records: the guard decides on them
// without error.
func TestRecordGuardOnEveryMetadataShape(t *testing.T) {
	alice := authenticationv1.UserInfo{Username: "alice"}
	const label = depv1alpha1.LabelDeletionRequested
	// vpc is the JSON of vpc-a with the given raw labels and annotations
	// (absent if "").
	vpc := func(labels, annotations string) []byte {
		meta := `"name":"vpc-a","namespace":"default"`
		if labels != "" {
			meta += `,"labels":` + labels
		}
		if annotations != "" {
			meta += `,"annotations":` + annotations
		}
		return []byte(`{"apiVersion":"network.io/v1","kind":"VPC","metadata":{` + meta + `}}`)
	}
	withRecord := `{"` + label + `":"true"}`
	tests := []struct {
		name        string
		obj, old    []byte
		wantAllowed bool
	}{
		{name: "a CREATE with null labels and annotations", obj: vpc("null", "null"), wantAllowed: true},
		{name: "a CREATE with empty labels and annotations", obj: vpc("{}", "{}"), wantAllowed: true},
		{name: "an UPDATE to null labels from a record removes it", obj: vpc("null", "null"), old: vpc(withRecord, ""), wantAllowed: true},
		{name: "an UPDATE from null labels to none", obj: vpc("", ""), old: vpc("null", "null"), wantAllowed: true},
		{name: "an UPDATE from null labels that sets a record is refused", obj: vpc(withRecord, "null"), old: vpc("null", "null")},
		{name: "an UPDATE from absent labels that sets a record is refused", obj: vpc(withRecord, "{}"), old: vpc("", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "req-1", Operation: admissionv1.Create, UserInfo: alice,
				Resource: metav1.GroupVersionResource{Group: vpcs.Group, Version: vpcs.Version, Resource: vpcs.Resource},
				Object:   runtime.RawExtension{Raw: tt.obj},
			}}
			if tt.old != nil {
				req.Operation, req.OldObject = admissionv1.Update, runtime.RawExtension{Raw: tt.old}
			}
			resp := NewRecordGuard(StaticSelf(authenticationv1.UserInfo{Username: webhookUser}), nil).Handle(context.Background(), req)
			if resp.Allowed != tt.wantAllowed {
				t.Errorf("allowed = %v, want %v (%+v)", resp.Allowed, tt.wantAllowed, resp.Result)
			}
			if !tt.wantAllowed && resp.Result.Code != http.StatusForbidden {
				t.Errorf("code = %d, want 403 (%s)", resp.Result.Code, resp.Result.Message)
			}
		})
	}
}

// When the webhook's identity cannot be learned, a write of a record is
// refused with 503 and a retry, and the identity is asked for again next
// time; a write without records does not need it.
func TestRecordGuardWithoutIdentity(t *testing.T) {
	calls := 0
	s := &SelfReview{review: func(context.Context) (authenticationv1.UserInfo, error) {
		calls++
		return authenticationv1.UserInfo{}, errors.New("kcp is unavailable")
	}}
	m := webhook.NewMetrics()
	g := NewRecordGuard(s, m)
	alice := authenticationv1.UserInfo{Username: "alice"}
	for i := range 2 {
		resp := g.Handle(context.Background(), recordWrite(t, alice, recordMeta{label: str("true")}, nil))
		if resp.Allowed || resp.Result.Code != http.StatusServiceUnavailable {
			t.Fatalf("attempt %d: allowed %v, result %+v; want 503", i, resp.Allowed, resp.Result)
		}
		for _, want := range []string{"kcp is unavailable", "retry", depv1alpha1.LabelDeletionRequested} {
			if !strings.Contains(resp.Result.Message, want) {
				t.Errorf("message %q does not contain %q", resp.Result.Message, want)
			}
		}
	}
	if calls != 2 {
		t.Errorf("the identity was asked for %d times, want 2 (a failure is not remembered)", calls)
	}
	// A write that sets no record does not need the identity.
	if resp := g.Handle(context.Background(), recordWrite(t, alice, recordMeta{}, nil)); !resp.Allowed {
		t.Errorf("a write without records was refused: %+v", resp.Result)
	}
	if calls != 2 {
		t.Errorf("the identity was asked for a write without records")
	}
	if got, _ := webhooktest.MetricValue(t, m, "dependency_webhook_record_writes_total", "outcome", RecordWriteDenied); got != 2 {
		t.Errorf("denied writes = %v, want 2", got)
	}
	if got, _ := webhooktest.MetricValue(t, m, "dependency_webhook_record_writes_total", "outcome", RecordWriteAllowed); got != 1 {
		t.Errorf("allowed writes = %v, want 1", got)
	}
}

// The identity is learned with one review, then remembered; a review
// that fails, or that authenticates nobody, is tried again.
func TestSelfReviewLearnsTheIdentityOnce(t *testing.T) {
	var (
		lock    sync.Mutex
		calls   int
		answers = []struct {
			user authenticationv1.UserInfo
			err  error
		}{
			{err: errors.New("connection refused")},
			{user: authenticationv1.UserInfo{}},
			{user: authenticationv1.UserInfo{Username: webhookUser, Extra: map[string]authenticationv1.ExtraValue{"authentication.kcp.io/cluster-name": {"root:deps"}}}},
			{user: authenticationv1.UserInfo{Username: "someone-else"}},
		}
	)
	s := &SelfReview{review: func(context.Context) (authenticationv1.UserInfo, error) {
		lock.Lock()
		defer lock.Unlock()
		a := answers[calls]
		calls++
		return a.user, a.err
	}}
	ctx := context.Background()
	me := authenticationv1.UserInfo{Username: webhookUser, Extra: map[string]authenticationv1.ExtraValue{"authentication.kcp.io/cluster-name": {"root:deps"}}}

	if _, err := s.Is(ctx, me); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("first review failed, Is() error = %v", err)
	}
	if _, err := s.Is(ctx, me); err == nil || !strings.Contains(err.Error(), "no user") {
		t.Errorf("second review authenticated nobody, Is() error = %v", err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, err := s.Is(ctx, me); err != nil || !ok {
				t.Errorf("Is(webhook) = %v, %v", ok, err)
			}
		}()
	}
	wg.Wait()
	if ok, err := s.Is(ctx, authenticationv1.UserInfo{Username: webhookUser}); err != nil || ok {
		t.Errorf("Is(webhook's name without its workspace) = %v, %v; want false", ok, err)
	}
	if ok, err := s.Is(ctx, authenticationv1.UserInfo{Username: "someone-else"}); err != nil || ok {
		t.Errorf("Is(someone-else) = %v, %v; want false", ok, err)
	}
	if id, err := s.Identity(ctx); err != nil || id.Username != webhookUser {
		t.Errorf("Identity() = %+v, %v", id, err)
	}
	lock.Lock()
	defer lock.Unlock()
	if calls != 3 {
		t.Errorf("reviewed %d times, want 3: two that failed, then one remembered", calls)
	}
}

// StaticSelf never reviews.
func TestStaticSelf(t *testing.T) {
	s := StaticSelf(authenticationv1.UserInfo{Username: webhookUser})
	if id, err := s.Identity(context.Background()); err != nil || id.Username != webhookUser {
		t.Errorf("Identity() = %+v, %v", id, err)
	}
	if ok, err := s.Is(context.Background(), authenticationv1.UserInfo{Username: webhookUser, Groups: []string{"x"}}); err != nil || !ok {
		t.Errorf("Is(webhook) = %v, %v", ok, err)
	}
	if ok, err := s.Is(context.Background(), authenticationv1.UserInfo{Username: "alice"}); err != nil || ok {
		t.Errorf("Is(alice) = %v, %v", ok, err)
	}
}
