package references

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/buger/jsonparser"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// revisionUID is the UID of the dependents of withRevision.
const revisionUID = types.UID("6f1c2a3b-0d4e-4f5a-8b6c-7d8e9f0a1b2c")

// withRevision sets the UID of the request's object and old object to
// revisionUID, and the resourceVersion of its old object (the stored state
// an UPDATE was admitted on).
func withRevision(t *testing.T, req admission.Request, oldRV string) admission.Request {
	t.Helper()
	set := func(raw []byte, path, value string) []byte {
		out, err := jsonparser.Set(raw, []byte(`"`+value+`"`), "metadata", path)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	req.Object.Raw = set(req.Object.Raw, "uid", string(revisionUID))
	if req.OldObject.Raw != nil {
		req.OldObject.Raw = set(set(req.OldObject.Raw, "uid", string(revisionUID)), "resourceVersion", oldRV)
	}
	return req
}

// The check of new references records the references that writes of a type
// whose dependents cannot be labelled add, under the id of the revision
// the write was admitted on (an UPDATE) or of the dependent's CREATE, and
// refuses those it could not record or that name an object being deleted.
func TestReferenceValidatorRecordsRevisionMarks(t *testing.T) {
	const uid = revisionUID
	notLabellable := map[registry.Target]registry.Labelling{vmsOfProvider: {Reason: "a reference lies in the status"}}
	forbidden := apierrors.NewForbidden(vpcs.GroupResource(), "vpc-a", errors.New("no"))
	tests := []struct {
		name       string
		req        admission.Request
		labellable bool
		ledgers    *fakeLedgers
		// targets are what a read finds (none if nil).
		targets  map[string]kcp.Meta
		wantCode int32
		wantMsg  string
		// wantMarks are the ids recorded on the VPCs, by "namespace/name".
		wantMarks    map[string][]string
		wantWarnings string
		// wantReads is set when the targets are read instead.
		wantReads bool
	}{
		{name: "a CREATE: the id of the CREATE",
			req:     withRevision(t, writeRequest("default", "vm-1", vpcRef("vpc-a"), nil, false), ""),
			ledgers: &fakeLedgers{}, wantMarks: map[string][]string{"default/vpc-a": {inflight.RevisionID(uid, "")}}},
		{name: "an UPDATE: the id of the revision it was admitted on",
			req:     withRevision(t, writeRequest("default", "vm-1", vpcRef("vpc-b"), vpcRef("vpc-a"), false), "42"),
			ledgers: &fakeLedgers{}, wantMarks: map[string][]string{"default/vpc-b": {inflight.RevisionID(uid, "42")}}},
		{name: "an UPDATE that keeps its references records nothing",
			req:     withRevision(t, writeRequest("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}, "cpu": 2}, vpcRef("vpc-a"), false), "42"),
			ledgers: &fakeLedgers{}},
		{name: "a dry run records nothing, and reads",
			req: func() admission.Request {
				r := withRevision(t, writeRequest("default", "vm-1", vpcRef("vpc-a"), nil, false), "")
				r.DryRun = ptr.To(true)
				return r
			}(),
			ledgers: &fakeLedgers{}, targets: map[string]kcp.Meta{"consumer|default/vpc-a": {Namespace: "default", Name: "vpc-a"}}, wantReads: true},
		{name: "a type that can be labelled is recorded by the labelling webhook: read only",
			req:        withRevision(t, writeRequest("default", "vm-1", vpcRef("vpc-a"), nil, false), ""),
			labellable: true, ledgers: &fakeLedgers{}, targets: map[string]kcp.Meta{"consumer|default/vpc-a": {Namespace: "default", Name: "vpc-a"}}, wantReads: true},
		{name: "an object being deleted refuses the write, and its mark stays",
			req:     withRevision(t, writeRequest("default", "vm-1", vpcRef("vpc-a"), vpcRef(""), false), "7"),
			ledgers: &fakeLedgers{terminating: map[string]bool{"default/vpc-a": true}}, wantCode: http.StatusForbidden, wantMsg: "it is being deleted",
			wantMarks: map[string][]string{"default/vpc-a": {inflight.RevisionID(uid, "7")}}},
		{name: "a missing object is allowed with a warning",
			req:     withRevision(t, writeRequest("default", "vm-1", vpcRef("vpc-a"), nil, false), ""),
			ledgers: &fakeLedgers{missing: map[string]bool{"default/vpc-a": true}}, wantWarnings: `references vpcs "vpc-a", which does not exist`},
		{name: "a reference that could not be recorded refuses the write, to be retried",
			req:     withRevision(t, writeRequest("default", "vm-1", vpcRef("vpc-a"), nil, false), ""),
			ledgers: &fakeLedgers{err: errors.New("boom")}, wantCode: http.StatusServiceUnavailable, wantMsg: "boom"},
		{name: "a write the webhook may not make, under a rule whose references are not tracked, is checked by reading",
			req:     withRevision(t, writeRequest("default", "vm-1", vpcRef("vpc-a"), nil, false), ""),
			ledgers: &fakeLedgers{err: forbidden}, targets: map[string]kcp.Meta{"consumer|default/vpc-a": {Namespace: "default", Name: "vpc-a", Terminating: true}},
			wantCode: http.StatusForbidden, wantMsg: "it is being deleted", wantReads: true},
		{name: "a CREATE without a UID is checked by reading",
			req:     writeRequest("default", "vm-1", vpcRef("vpc-a"), nil, false),
			ledgers: &fakeLedgers{}, targets: map[string]kcp.Meta{"consumer|default/vpc-a": {Namespace: "default", Name: "vpc-a"}}, wantReads: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			labellings := notLabellable
			if tt.labellable {
				labellings = map[registry.Target]registry.Labelling{vmsOfProvider: {Scheme: vmLabelScheme(t), Labellable: true}}
			}
			guards := staticGuards{vms.GroupResource(): {vmGuard(targetSource, ".spec.vpcRef.name")}}
			targets := &fakeTargets{objects: tt.targets}
			v := NewReferenceValidator(guards, loaded(true), targets, validRecords{}, time.Second, nil, WithRevisionMarks(Recording{
				Guards: guards, Targets: targets, Ledgers: tt.ledgers, IDs: inflight.NewIDs(nil),
				Landed: func(index.Source) inflight.Landed {
					return func(string) (time.Time, bool) { return time.Time{}, false }
				},
				Records: validRecords{}, Timeout: time.Second,
			}, &fakeLabelling{labellings: labellings}))
			resp := v.Handle(webhook.WithProvider(context.Background(), provider), tt.req)
			if tt.wantCode != 0 {
				if resp.Allowed || resp.Result.Code != tt.wantCode || !strings.Contains(resp.Result.Message, tt.wantMsg) {
					t.Fatalf("response %+v; want code %d with %q", resp.Result, tt.wantCode, tt.wantMsg)
				}
				if len(tt.ledgers.withdrawn) > 0 {
					t.Errorf("withdrew the marks of %v", tt.ledgers.withdrawn)
				}
			} else if !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			if tt.wantWarnings != "" && !slices.ContainsFunc(resp.Warnings, func(w string) bool { return strings.Contains(w, tt.wantWarnings) }) {
				t.Errorf("warnings %q, want one with %q", resp.Warnings, tt.wantWarnings)
			}
			if len(tt.ledgers.marks) != len(tt.wantMarks) {
				t.Errorf("marks %v, want %v", tt.ledgers.marks, tt.wantMarks)
			}
			for k, want := range tt.wantMarks {
				if !slices.Equal(tt.ledgers.marks[k], want) {
					t.Errorf("marks on %s: %v, want %v", k, tt.ledgers.marks[k], want)
				}
			}
			if read := len(targets.Calls()) > 0; read != tt.wantReads {
				t.Errorf("targets read: %v (%v), want %v", read, targets.Calls(), tt.wantReads)
			}
		})
	}
}

// fakeSelf tells the webhook's own user apart by name.
type fakeSelf struct{ err error }

func (f fakeSelf) Is(_ context.Context, user authenticationv1.UserInfo) (bool, error) {
	return user.Username == "dependency-webhook", f.err
}

// The check answers the webhook's own probes (see package tracking,
// KindCheck) where it records references, before it reads or records
// anything; any other request, or a replica that would not record, is
// checked as usual.
func TestReferenceValidatorAnswersProbes(t *testing.T) {
	probeName := tracking.CheckProbePrefix + "abcdefgh"
	answers := tracking.NewAnswers(func() [][]byte { return [][]byte{[]byte("secret")} })
	probe := func(user string, dryRun bool, name string) admission.Request {
		r := withRevision(t, writeRequest("default", "vm-1", vpcRef(name), vpcRef("vpc-a"), false), "42")
		r.DryRun = ptr.To(dryRun)
		r.UserInfo = authenticationv1.UserInfo{Username: user}
		return r
	}
	tests := []struct {
		name       string
		req        admission.Request
		labellable bool
		self       Self
		wantProbe  bool
		wantReads  bool
	}{
		{name: "the webhook's dry run adding a reference to a probe's name: answered", req: probe("dependency-webhook", true, probeName), self: fakeSelf{}, wantProbe: true},
		{name: "another user's: checked", req: probe("tenant", true, probeName), self: fakeSelf{}, wantReads: true},
		{name: "the webhook's, not a dry run: recorded", req: probe("dependency-webhook", false, probeName), self: fakeSelf{}},
		{name: "the webhook's dry run adding a reference to another name: checked", req: probe("dependency-webhook", true, "vpc-b"), self: fakeSelf{}, wantReads: true},
		{name: "a type whose references the labelling webhook records: checked (this check records nothing)", req: probe("dependency-webhook", true, probeName), labellable: true, self: fakeSelf{}, wantReads: true},
		{name: "the webhook's identity unknown: checked", req: probe("dependency-webhook", true, probeName), self: fakeSelf{err: errors.New("no review")}, wantReads: true},
		{name: "without probes: checked", req: probe("dependency-webhook", true, probeName), wantReads: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			labellings := map[registry.Target]registry.Labelling{vmsOfProvider: {Reason: "a reference lies in the status"}}
			if tt.labellable {
				labellings = map[registry.Target]registry.Labelling{vmsOfProvider: {Scheme: vmLabelScheme(t), Labellable: true}}
			}
			guards := staticGuards{vms.GroupResource(): {vmGuard(targetSource, ".spec.vpcRef.name")}}
			targets := &fakeTargets{}
			ledgers := &fakeLedgers{}
			opts := []ValidatorOption{WithRevisionMarks(Recording{
				Guards: guards, Targets: targets, Ledgers: ledgers, IDs: inflight.NewIDs(nil),
				Landed: func(index.Source) inflight.Landed {
					return func(string) (time.Time, bool) { return time.Time{}, false }
				},
				Records: validRecords{}, Timeout: time.Second,
			}, &fakeLabelling{labellings: labellings})}
			if tt.self != nil {
				opts = append(opts, WithProbes(tt.self, answers))
			}
			v := NewReferenceValidator(guards, loaded(true), targets, validRecords{}, time.Second, nil, opts...)
			resp := v.Handle(webhook.WithProvider(context.Background(), provider), tt.req)
			// The answer is signed.
			answered := !resp.Allowed && resp.Result.Code == http.StatusForbidden && strings.Contains(resp.Result.Message, tracking.CheckProbeAnswer(probeName, answers.Sign(tracking.KindCheck, probeName, "")))
			if answered != tt.wantProbe {
				t.Errorf("answered the probe: %v, want %v (%+v)", answered, tt.wantProbe, resp.Result)
			}
			if tt.wantProbe && (len(targets.calls) > 0 || len(ledgers.marks) > 0) {
				t.Errorf("a probe read %v or recorded %v", targets.calls, ledgers.marks)
			}
			if got := len(targets.calls) > 0; got != tt.wantReads {
				t.Errorf("read the targets: %v, want %v", got, tt.wantReads)
			}
		})
	}
}
