package references

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// fakeLedgers records marks on targets by "namespace/name": a target in
// missing does not exist, one in terminating is being deleted, one in
// deferred carries a record of a deferred deletion, and err fails every
// write.
type fakeLedgers struct {
	lock        sync.Mutex
	marks       map[string][]string
	missing     map[string]bool
	terminating map[string]bool
	deferred    map[string]bool
	err         error
	// failing fails the writes of these names with err; all fail if nil.
	failing map[string]bool
	// delay is how long each write takes (or until its context ends).
	delay time.Duration
	// failDelay is how long a failing write takes, whatever its context.
	failDelay time.Duration
	// primed are the targets primed, by "namespace/name".
	primed map[string]bool
	// withdrawn are the targets whose mark was withdrawn, by
	// "namespace/name".
	withdrawn []string
}

// Withdraw removes the id from the marks of the target.
func (f *fakeLedgers) Withdraw(_ context.Context, t inflight.Target, id string, _ inflight.Landed) error {
	f.lock.Lock()
	defer f.lock.Unlock()
	key := t.Namespace + "/" + t.Name
	if !slices.Contains(f.marks[key], id) {
		return errors.New("withdrew a mark never written: " + id)
	}
	f.marks[key] = slices.DeleteFunc(f.marks[key], func(m string) bool { return m == id })
	f.withdrawn = append(f.withdrawn, key)
	slices.Sort(f.withdrawn)
	return nil
}

// Prime records the targets primed, by "namespace/name".
func (f *fakeLedgers) Prime(t inflight.Target, _ []byte) {
	f.lock.Lock()
	defer f.lock.Unlock()
	if f.primed == nil {
		f.primed = map[string]bool{}
	}
	f.primed[t.Namespace+"/"+t.Name] = true
}

func (f *fakeLedgers) Record(ctx context.Context, t inflight.Target, id string, _ inflight.Landed) (inflight.Result, error) {
	if f.delay > 0 {
		select {
		case <-ctx.Done():
			return inflight.Result{}, ctx.Err()
		case <-time.After(f.delay):
		}
	}
	if f.err != nil && f.failing[t.Name] {
		time.Sleep(f.failDelay)
	}
	f.lock.Lock()
	defer f.lock.Unlock()
	key := t.Namespace + "/" + t.Name
	switch {
	case f.err != nil && (f.failing == nil || f.failing[t.Name]):
		return inflight.Result{}, f.err
	case f.missing[key]:
		return inflight.Result{Missing: true}, nil
	}
	if f.marks == nil {
		f.marks = map[string][]string{}
	}
	f.marks[key] = append(f.marks[key], id)
	return inflight.Result{Object: kcp.Meta{Namespace: t.Namespace, Name: t.Name, Terminating: f.terminating[key], DeletionRequested: f.deferred[key], DeletionRecord: "valid"}}, nil
}

// validRecords verifies every record.
type validRecords struct{}

func (validRecords) Verify(_ schema.GroupResource, obj kcp.Meta) error {
	if obj.DeletionRecord == "valid" {
		return nil
	}
	return errors.New("invalid")
}

func TestLabelMutatorRecordsReferences(t *testing.T) {
	scheme := vmLabelScheme(t)
	labelling := &fakeLabelling{labellings: map[registry.Target]registry.Labelling{vmsOfProvider: {Scheme: scheme, Labellable: true}}}
	untrackedLong := registry.Tracking{Status: metav1.ConditionFalse, Since: time.Now().Add(-time.Minute)}
	untrackedNow := registry.Tracking{Status: metav1.ConditionFalse, Since: time.Now()}
	ids := inflight.NewIDs(nil)
	tests := []struct {
		name       string
		op         admissionv1.Operation
		spec, old  map[string]any
		oldID      string
		dryRun     bool
		ledgers    *fakeLedgers
		tracking   registry.Tracking
		targets    *fakeTargets
		wantMarked []string
		// wantWithdrawn are the targets whose mark a refused write
		// withdrew.
		wantWithdrawn []string
		// wantWarning is in the warnings of an allowed write.
		wantWarning string
		wantLabel   string // "new", "old" or "" (none)
		wantCode    int32
		wantMsg     string
	}{
		{name: "a CREATE records its reference and gets an admission id", op: admissionv1.Create, spec: vpcRef("vpc-a"),
			ledgers: &fakeLedgers{}, wantMarked: []string{"default/vpc-a"}, wantLabel: "new"},
		{name: "an UPDATE that adds a reference records it, with a new id", op: admissionv1.Update, spec: map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}, "nics": []any{map[string]any{"vpc": "vpc-b"}}},
			old: vpcRef("vpc-a"), oldID: "0123456789abcdef", ledgers: &fakeLedgers{}, wantMarked: []string{"default/vpc-b"}, wantLabel: "new"},
		{name: "an UPDATE that adds no reference keeps the id", op: admissionv1.Update, spec: vpcRef("vpc-a"), old: vpcRef("vpc-a"), oldID: "0123456789abcdef",
			ledgers: &fakeLedgers{}, wantLabel: "old"},
		{name: "a dry run records nothing", op: admissionv1.Create, spec: vpcRef("vpc-a"), dryRun: true, ledgers: &fakeLedgers{}},
		{name: "a reference to a missing object records nothing, with a warning", op: admissionv1.Create, spec: vpcRef("vpc-a"),
			ledgers: &fakeLedgers{missing: map[string]bool{"default/vpc-a": true}}, wantWarning: `references vpcs "vpc-a", which does not exist; the reference is allowed`},
		{name: "one reference recorded, one to a missing object: the id, and a warning about the other", op: admissionv1.Create,
			spec:    map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}, "nics": []any{map[string]any{"vpc": "vpc-b"}}},
			ledgers: &fakeLedgers{missing: map[string]bool{"default/vpc-b": true}}, wantMarked: []string{"default/vpc-a"}, wantLabel: "new",
			wantWarning: `references vpcs "vpc-b", which does not exist`},
		{name: "a reference to an object being deleted is refused; the object's mark is left, as it is going", op: admissionv1.Create, spec: vpcRef("vpc-a"),
			ledgers: &fakeLedgers{terminating: map[string]bool{"default/vpc-a": true}}, wantCode: http.StatusForbidden, wantMsg: `cannot reference vpcs "vpc-a": it is being deleted`},
		{name: "a reference to an object whose deletion is deferred is refused, and its mark withdrawn", op: admissionv1.Create, spec: vpcRef("vpc-a"),
			ledgers: &fakeLedgers{deferred: map[string]bool{"default/vpc-a": true}}, wantCode: http.StatusForbidden, wantMsg: "its deletion is deferred",
			wantWithdrawn: []string{"default/vpc-a"}},
		{name: "a write refused for one object's deferred deletion withdraws its marks from every object", op: admissionv1.Create,
			spec:    map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}, "nics": []any{map[string]any{"vpc": "vpc-b"}, map[string]any{"vpc": "vpc-c"}}},
			ledgers: &fakeLedgers{deferred: map[string]bool{"default/vpc-b": true}, terminating: map[string]bool{"default/vpc-c": true}}, wantCode: http.StatusForbidden, wantMsg: "its deletion is deferred",
			wantWithdrawn: []string{"default/vpc-a", "default/vpc-b"}},
		{name: "a failed write refuses, to be retried", op: admissionv1.Create, spec: vpcRef("vpc-a"),
			ledgers: &fakeLedgers{err: errors.New("boom")}, wantCode: http.StatusServiceUnavailable, wantMsg: "boom"},
		{name: "a write that fails on one object refuses, and withdraws its marks from the others", op: admissionv1.Create,
			spec:    map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}, "nics": []any{map[string]any{"vpc": "vpc-b"}}},
			ledgers: &fakeLedgers{err: errors.New("boom"), failing: map[string]bool{"vpc-b": true}, failDelay: 50 * time.Millisecond}, wantCode: http.StatusServiceUnavailable, wantMsg: "boom",
			wantWithdrawn: []string{"default/vpc-a"}},
		{name: "no grant while the rule says nothing of tracking: admitted unrecorded", op: admissionv1.Create, spec: vpcRef("vpc-a"),
			ledgers: &fakeLedgers{err: apierrors.NewForbidden(vpcs.GroupResource(), "vpc-a", errors.New("no"))}},
		{name: "no grant, the rule untracked for long: admitted unrecorded", op: admissionv1.Create, spec: vpcRef("vpc-a"), tracking: untrackedLong,
			ledgers: &fakeLedgers{err: apierrors.NewForbidden(vpcs.GroupResource(), "vpc-a", errors.New("no"))}},
		// kcp spares the check of new references a write whose id is new,
		// so the labelling webhook checks what it cannot record.
		{name: "no grant, the rule untracked for long, the object being deleted: refused", op: admissionv1.Create, spec: vpcRef("vpc-a"), tracking: untrackedLong,
			ledgers:  &fakeLedgers{err: apierrors.NewForbidden(vpcs.GroupResource(), "vpc-a", errors.New("no"))},
			targets:  &fakeTargets{objects: map[string]kcp.Meta{"consumer|default/vpc-a": {Namespace: "default", Name: "vpc-a", Terminating: true}}},
			wantCode: http.StatusForbidden, wantMsg: `cannot reference vpcs "vpc-a": it is being deleted`},
		{name: "no grant, the rule untracked for long, the object missing: admitted with a warning", op: admissionv1.Create, spec: vpcRef("vpc-a"), tracking: untrackedLong,
			ledgers:     &fakeLedgers{err: apierrors.NewForbidden(vpcs.GroupResource(), "vpc-a", errors.New("no"))},
			wantWarning: `references vpcs "vpc-a", which does not exist`},
		{name: "no grant, the rule untracked a moment ago: refused, to be retried", op: admissionv1.Create, spec: vpcRef("vpc-a"), tracking: untrackedNow,
			ledgers:  &fakeLedgers{err: apierrors.NewForbidden(vpcs.GroupResource(), "vpc-a", errors.New("no"))},
			wantCode: http.StatusServiceUnavailable, wantMsg: "may not patch vpcs.network.io"},
		{name: "no grant, the rule tracked: refused, to be retried", op: admissionv1.Create, spec: vpcRef("vpc-a"), tracking: registry.Tracking{Status: metav1.ConditionTrue, Since: time.Now()},
			ledgers:  &fakeLedgers{err: apierrors.NewForbidden(vpcs.GroupResource(), "vpc-a", errors.New("no"))},
			wantCode: http.StatusServiceUnavailable, wantMsg: "grants patch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			guard := vmGuard(targetSource, ".spec.vpcRef.name", ".spec.nics[*].vpc")
			guard.Tracking = tt.tracking
			targets := tt.targets
			if targets == nil {
				targets = &fakeTargets{}
			}
			m := NewLabelMutator(labelling, loaded(true), nil, WithRecording(Recording{
				Guards: staticGuards{vms.GroupResource(): {guard}}, Targets: targets, Ledgers: tt.ledgers, IDs: ids,
				Landed: func(index.Source) inflight.Landed {
					return func(string) (time.Time, bool) { return time.Time{}, false }
				},
				Records: validRecords{}, Timeout: time.Second,
			}))
			var labels, oldLabels map[string]string
			if tt.oldID != "" {
				oldLabels = map[string]string{depv1alpha1.LabelAdmission: tt.oldID}
				labels = map[string]string{depv1alpha1.LabelAdmission: tt.oldID}
			}
			req := labelRequest(t, tt.op, labels, oldLabels, tt.spec)
			if tt.old != nil {
				req.OldObject.Raw = labelObject(t, oldLabels, tt.old)
			}
			req.DryRun = ptr.To(tt.dryRun)
			resp := m.Handle(webhook.WithEndpoint(webhook.WithProvider(context.Background(), provider), webhook.EndpointLabels, scheme.Fingerprint), req)
			if tt.wantCode != 0 {
				if resp.Allowed || resp.Result.Code != tt.wantCode || !strings.Contains(resp.Result.Message, tt.wantMsg) {
					t.Fatalf("response %+v; want code %d with %q", resp.Result, tt.wantCode, tt.wantMsg)
				}
				if !slices.Equal(tt.ledgers.withdrawn, tt.wantWithdrawn) {
					t.Errorf("withdrawn from %v, want %v", tt.ledgers.withdrawn, tt.wantWithdrawn)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			if tt.wantWarning != "" && !slices.ContainsFunc(resp.Warnings, func(w string) bool { return strings.Contains(w, tt.wantWarning) }) {
				t.Errorf("warnings %q, want one with %q", resp.Warnings, tt.wantWarning)
			}
			var marked []string
			for k := range tt.ledgers.marks {
				marked = append(marked, k)
			}
			if strings.Join(marked, ",") != strings.Join(tt.wantMarked, ",") {
				t.Errorf("marked %v, want %v", marked, tt.wantMarked)
			}
			got := applyPatches(t, req.Object.Raw, resp)[depv1alpha1.LabelAdmission]
			switch tt.wantLabel {
			case "new":
				if !inflight.ValidID(got) || got == tt.oldID {
					t.Errorf("admission label %q, want a new id", got)
				}
				for _, ids := range tt.ledgers.marks {
					if ids[0] != got {
						t.Errorf("marked with %q, labelled %q", ids[0], got)
					}
				}
			case "old":
				if got != tt.oldID {
					t.Errorf("admission label %q, want the old %q", got, tt.oldID)
				}
			default:
				if got != "" {
					t.Errorf("admission label %q, want none", got)
				}
			}
		})
	}
}

// kcp calls a mutating webhook again within the same request when a later
// one changed the object: the second call finds the id the first set, and
// records the same id again rather than a new one (which would never land).
func TestLabelMutatorReusesItsOwnIDOnReinvocation(t *testing.T) {
	scheme := vmLabelScheme(t)
	labelling := &fakeLabelling{labellings: map[registry.Target]registry.Labelling{vmsOfProvider: {Scheme: scheme, Labellable: true}}}
	ledgers := &fakeLedgers{}
	m := NewLabelMutator(labelling, loaded(true), nil, WithRecording(Recording{
		Guards: staticGuards{vms.GroupResource(): {vmGuard(targetSource, ".spec.vpcRef.name")}}, Targets: &fakeTargets{}, Ledgers: ledgers, IDs: inflight.NewIDs(nil),
		Landed: func(index.Source) inflight.Landed {
			return func(string) (time.Time, bool) { return time.Time{}, false }
		},
		Records: validRecords{},
	}))
	ctx := webhook.WithEndpoint(webhook.WithProvider(context.Background(), provider), webhook.EndpointLabels, scheme.Fingerprint)
	req := labelRequest(t, admissionv1.Create, nil, nil, vpcRef("vpc-a"))
	first := applyPatches(t, req.Object.Raw, m.Handle(ctx, req))
	again := labelRequest(t, admissionv1.Create, first, nil, vpcRef("vpc-a"))
	second := applyPatches(t, again.Object.Raw, m.Handle(ctx, again))
	if first[depv1alpha1.LabelAdmission] == "" || second[depv1alpha1.LabelAdmission] != first[depv1alpha1.LabelAdmission] {
		t.Errorf("ids %q then %q; want the same", first[depv1alpha1.LabelAdmission], second[depv1alpha1.LabelAdmission])
	}
	if got := ledgers.marks["default/vpc-a"]; len(got) != 2 || got[0] != got[1] {
		t.Errorf("marks %v; want the same id twice", got)
	}
	// A user's copy of another dependent's id is no id of this one.
	copied := labelRequest(t, admissionv1.Create, map[string]string{depv1alpha1.LabelAdmission: first[depv1alpha1.LabelAdmission]}, nil, vpcRef("vpc-a"))
	copied.Name = "vm-2"
	copied.Object.Raw = []byte(strings.Replace(string(copied.Object.Raw), `"name":"vm-1"`, `"name":"vm-2"`, 1))
	if got := applyPatches(t, copied.Object.Raw, m.Handle(ctx, copied))[depv1alpha1.LabelAdmission]; got == first[depv1alpha1.LabelAdmission] {
		t.Error("a copied id was kept")
	}
	// A call that refuses under an id it found withdraws nothing: the marks
	// may be another request's.
	ledgers.deferred = map[string]bool{"default/vpc-a": true}
	if resp := m.Handle(ctx, labelRequest(t, admissionv1.Create, first, nil, vpcRef("vpc-a"))); resp.Allowed {
		t.Fatal("a reference to an object whose deletion is deferred was allowed")
	}
	if len(ledgers.withdrawn) > 0 {
		t.Errorf("withdrew the marks of %v under an id found on the object", ledgers.withdrawn)
	}
}
