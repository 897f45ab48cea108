package denial

import (
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion"
)

var vpcs = schema.GroupResource{Group: "network.test.io", Resource: "vpcs"}

// denied returns the error kube-apiserver returns for a webhook's denial
// with code, message and causes.
func denied(code int32, msg string, details *metav1.StatusDetails) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: metav1.StatusReasonForbidden, Details: details,
		Message: `admission webhook "deletion.dependencies.opendefense.cloud" denied the request: ` + msg,
	}}
}

func blockerCauses(total int, blockers ...string) *metav1.StatusDetails {
	d := &metav1.StatusDetails{Name: "vpc-a", Group: "network.test.io", Kind: "vpcs"}
	for _, b := range blockers {
		d.Causes = append(d.Causes, metav1.StatusCause{Type: CauseBlocker, Message: b, Field: ".spec.vpcRef.name"})
	}
	d.Causes = append(d.Causes, metav1.StatusCause{Type: CauseBlockers, Message: strconv.Itoa(total)})
	return d
}

const (
	vm1 = `{"kind":"VirtualMachine","namespace":"default","name":"vm-1","rule":"abc/vm-dependencies","path":".spec.vpcRef.name"}`
	vm2 = `{"kind":"VirtualMachine","namespace":"default","name":"vm-2","rule":"abc/vm-dependencies","path":".spec.vpcRef.name"}`
)

var (
	blocker1 = Blocker{Kind: "VirtualMachine", Namespace: "default", Name: "vm-1", Rule: "abc/vm-dependencies", Path: ".spec.vpcRef.name"}
	blocker2 = Blocker{Kind: "VirtualMachine", Namespace: "default", Name: "vm-2", Rule: "abc/vm-dependencies", Path: ".spec.vpcRef.name"}
)

func TestCausesAreTheWebhooks(t *testing.T) {
	if CauseBlocker != deletion.CauseBlocker || CauseBlockers != deletion.CauseBlockers {
		t.Error("the cause types differ from those of internal/webhook/deletion")
	}
}

func TestRead(t *testing.T) {
	stillReferenced := `vpcs.network.test.io "vpc-a" in namespace "default" is still referenced by VirtualMachine/default/vm-1, VirtualMachine/default/vm-2; delete these or remove their references first`
	for _, tc := range []struct {
		name     string
		err      error
		verdict  Verdict
		blockers []Blocker
		total    int
		retry    int32
		isError  bool
	}{
		{name: "allowed", err: nil, verdict: Allowed},
		{name: "blocked with details", err: denied(403, stillReferenced, blockerCauses(2, vm1, vm2)), verdict: Blocked, blockers: []Blocker{blocker1, blocker2}, total: 2},
		{name: "more blockers than the details list", err: denied(403, stillReferenced, blockerCauses(5, vm1, vm2)), verdict: Blocked, blockers: []Blocker{blocker1, blocker2}, total: 5},
		{name: "a cause that does not parse is skipped", err: denied(403, stillReferenced, blockerCauses(2, vm1, "not json")), verdict: Blocked, blockers: []Blocker{blocker1}, total: 2},
		{
			name:    "blocked, from the message of a webhook without details",
			err:     denied(403, `vpcs.network.test.io "vpc-a" in namespace "default" is still referenced by VirtualMachine/default/vm-1, Zone/z and 3 more; delete these or remove their references first`, nil),
			verdict: Blocked, blockers: []Blocker{{Kind: "VirtualMachine", Namespace: "default", Name: "vm-1"}, {Kind: "Zone", Name: "z"}}, total: 5,
		},
		{
			name:    "would be deferred",
			err:     denied(403, stillReferenced+"; its deletion would be deferred until its 2 dependents are gone", blockerCauses(2, vm1, vm2)),
			verdict: WouldBeDeferred, blockers: []Blocker{blocker1, blocker2}, total: 2,
		},
		{
			name: "in flight",
			err: &apierrors.StatusError{ErrStatus: metav1.Status{Code: http.StatusConflict, Reason: metav1.StatusReasonConflict,
				Message: `admission webhook "deletion.dependencies.opendefense.cloud" denied the request: vpcs "vpc-a" in namespace "default" may be referenced by a VirtualMachine whose create or update is in flight (admitted at 2026-11-26T10:00:00Z, not stored yet); retry in 3s`,
				Details: &metav1.StatusDetails{RetryAfterSeconds: 3}}},
			verdict: InFlight, retry: 3,
		},
		{name: "refused by RBAC", err: apierrors.NewForbidden(vpcs, "vpc-a", errors.New(`User "alice" cannot delete resource "vpcs"`)), verdict: Refused},
		{name: "not found", err: apierrors.NewNotFound(vpcs, "vpc-a"), isError: true},
		{name: "the webhook asks to retry", err: denied(503, "the webhook has not loaded all DependencyRules yet; retry", nil), isError: true},
		{name: "a conflict of another kind", err: apierrors.NewConflict(vpcs, "vpc-a", errors.New("the object has been modified")), isError: true},
		{name: "not an API error", err: errors.New("connection refused"), isError: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(tc.err)
			if tc.isError {
				if err == nil {
					t.Fatalf("Read() = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Read(): %v", err)
			}
			if got.Verdict != tc.verdict || got.Total != tc.total || got.RetryAfterSeconds != tc.retry || !reflect.DeepEqual(got.Blockers, tc.blockers) {
				t.Errorf("Read() = %+v\nwant verdict %s, blockers %+v, total %d, retry %d", got, tc.verdict, tc.blockers, tc.total, tc.retry)
			}
		})
	}
}

func TestBanner(t *testing.T) {
	for v, want := range map[Verdict]string{Allowed: "ALLOWED", Blocked: "BLOCKED", WouldBeDeferred: "WOULD BE DEFERRED", InFlight: "IN FLIGHT", Refused: "REFUSED"} {
		if got := v.Banner(); got != want {
			t.Errorf("%s.Banner() = %q, want %q", v, got, want)
		}
	}
}

func TestWebhookMessage(t *testing.T) {
	if got := WebhookMessage(`admission webhook "deletion.dependencies.opendefense.cloud" denied the request: vpcs "a" may be referenced`); got != `vpcs "a" may be referenced` {
		t.Errorf("WebhookMessage() = %q", got)
	}
	if got := WebhookMessage("forbidden"); got != "forbidden" {
		t.Errorf("WebhookMessage() = %q", got)
	}
}
