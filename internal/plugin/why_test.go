package plugin

import (
	"bytes"
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opendefensecloud/dependency-controller/internal/denial"
)

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
		d.Causes = append(d.Causes, metav1.StatusCause{Type: denial.CauseBlocker, Message: b, Field: ".spec.vpcRef.name"})
	}
	d.Causes = append(d.Causes, metav1.StatusCause{Type: denial.CauseBlockers, Message: strconv.Itoa(total)})
	return d
}

// vm1 is the cause of a blocker, blocker1 what it reads as.
const vm1 = `{"kind":"VirtualMachine","namespace":"default","name":"vm-1","rule":"abc/vm-dependencies","path":".spec.vpcRef.name"}`

var blocker1 = denial.Blocker{Kind: "VirtualMachine", Namespace: "default", Name: "vm-1", Rule: "abc/vm-dependencies", Path: ".spec.vpcRef.name"}

func TestPrintWhy(t *testing.T) {
	target, err := resolve(testMapper(), []string{"vpc/vpc-a"}, "default")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		result WhyResult
		want   []string
	}{
		{
			name:   "allowed, with a warning",
			result: WhyResult{Answer: denial.Answer{Verdict: denial.Allowed}, Warnings: []string{"skip-protection: bypassed by alice"}},
			want:   []string{"Warning: skip-protection: bypassed by alice\n", `ALLOWED: deleting vpcs.network.test.io "vpc-a" in namespace "default" would be admitted now (dry run)` + "\n"},
		},
		{
			name:   "blocked, every blocker and how many are not listed",
			result: WhyResult{Answer: denial.Answer{Verdict: denial.Blocked, Blockers: []denial.Blocker{blocker1, {Kind: "Zone", Name: "z"}}, Total: 1002}},
			want: []string{
				`BLOCKED: vpcs.network.test.io "vpc-a" in namespace "default" is still referenced by 1002 objects` + "\n",
				"KIND             NAMESPACE   NAME   RULE                  PATH\n",
				"VirtualMachine   default     vm-1   abc/vm-dependencies   .spec.vpcRef.name\n",
				"Zone             <none>      z      <none>                <none>\n",
				"1000 more not listed: the denial names at most 2 (kubectl dependencies refs lists them all).\n",
			},
		},
		{
			name:   "would be deferred",
			result: WhyResult{Answer: denial.Answer{Verdict: denial.WouldBeDeferred, Blockers: []denial.Blocker{blocker1}, Total: 1}},
			want:   []string{"WOULD BE DEFERRED: " + `vpcs.network.test.io "vpc-a" in namespace "default" is still referenced by 1 object; under a Replay rule, deleting it would defer its deletion until they are gone`},
		},
		{
			name:   "in flight",
			result: WhyResult{Answer: denial.Answer{Verdict: denial.InFlight, Message: `admission webhook "x" denied the request: may be referenced ...; retry in 3s`, RetryAfterSeconds: 3}},
			want:   []string{"IN FLIGHT: a reference to vpcs.network.test.io \"vpc-a\" in namespace \"default\" is being admitted: may be referenced ...; retry in 3s\n", "Ask again in 3s"},
		},
		{
			name:   "refused",
			result: WhyResult{Answer: denial.Answer{Verdict: denial.Refused, Message: `forbidden: User "alice" cannot delete`}},
			want:   []string{`REFUSED: deleting vpcs.network.test.io "vpc-a" in namespace "default" would be refused, not because of dependents: forbidden: User "alice" cannot delete`, "kubectl dependencies refs"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printWhy(&out, target, tc.result); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestWhySendsOneDryRunDelete(t *testing.T) {
	r := &fakeReader{deleteErr: denied(403, "is still referenced by VirtualMachine/default/vm-1; delete these", blockerCauses(1, vm1))}
	target, err := resolve(testMapper(), []string{"vpcs", "vpc-a"}, "default")
	if err != nil {
		t.Fatal(err)
	}
	got, err := why(context.Background(), &env{reader: r, warnings: &warnings{}}, target)
	if err != nil {
		t.Fatal(err)
	}
	if got.Verdict != denial.Blocked || got.Object.Name != "vpc-a" || len(got.Blockers) != 1 {
		t.Errorf("why() = %+v", got)
	}
	if reqs := r.requestsMatching(""); !reflect.DeepEqual(reqs, []string{"delete vpcs default vpc-a"}) {
		t.Errorf("requests = %q, want one DELETE", reqs)
	}
}
