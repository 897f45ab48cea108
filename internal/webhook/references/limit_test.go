package references

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// nics is the spec of a VirtualMachine with a NIC in each VPC named
// vpc-<from> to vpc-<to - 1>, and its vpcRef to vpc-0 if ref.
func nics(from, to int, ref bool) map[string]any {
	list := []any{}
	for i := from; i < to; i++ {
		list = append(list, map[string]any{"vpc": fmt.Sprintf("vpc-%d", i)})
	}
	spec := map[string]any{"nics": list}
	if ref {
		spec["vpcRef"] = map[string]any{"name": "vpc-0"}
	}
	return spec
}

// limitCases are the writes of a VirtualMachine under a limit of 10
// references per object (VPCs at .spec.vpcRef.name and .spec.nics[*].vpc),
// and what both webhooks answer.
var limitCases = []struct {
	name      string
	spec, old map[string]any
	dryRun    bool
	// wantRefused: a 403 at once, naming the number and the limit.
	wantRefused string
	wantWarning string
	// wantChecked is how many targets are read or recorded.
	wantChecked int
}{
	{name: "a CREATE with as many references as the limit is checked, with a warning",
		spec: nics(0, 10, false), wantChecked: 10, wantWarning: `VirtualMachine "vm-1" references 10 objects; one object may reference at most 10`},
	{name: "the same object at two paths counts once",
		spec: nics(0, 10, true), wantChecked: 10, wantWarning: "references 10 objects"},
	{name: "a CREATE below four fifths of the limit gets no warning", spec: nics(0, 7, false), wantChecked: 7},
	{name: "a CREATE at four fifths of the limit gets a warning", spec: nics(0, 8, false), wantChecked: 8, wantWarning: "references 8 objects"},
	{name: "a CREATE one past the limit is refused at once, naming the number and the limit",
		spec: nics(0, 11, false), wantRefused: `VirtualMachine "vm-1" would reference 11 objects; one object may reference at most 10 under the dependency rules of its type`},
	{name: "a CREATE far past the limit is refused at once", spec: nics(0, 3000, false), wantRefused: "would reference 3000 objects"},
	{name: "a dry run past the limit is refused too", spec: nics(0, 11, false), dryRun: true, wantRefused: "would reference 11 objects"},
	{name: "an UPDATE that adds one reference past the limit is refused",
		spec: nics(0, 11, false), old: nics(0, 10, false), wantRefused: "would reference 11 objects"},
	{name: "an UPDATE that swaps references within the limit checks only the new one",
		spec: nics(1, 11, false), old: nics(0, 10, false), wantChecked: 1, wantWarning: "references 10 objects"},
	{name: "an UPDATE that removes references from an object past the limit goes through",
		spec: nics(0, 20, false), old: nics(0, 30, false)},
	{name: "an UPDATE that keeps the references of an object past the limit goes through",
		spec: nics(0, 30, false), old: nics(0, 30, false)},
	{name: "an UPDATE that adds a reference to an object past the limit is refused, however many it removes",
		spec: nics(1, 21, false), old: nics(0, 20, false), wantRefused: "would reference 20 objects"},
}

func TestReferenceValidatorLimit(t *testing.T) {
	guards := staticGuards{vms.GroupResource(): {vmGuard(targetSource, ".spec.vpcRef.name", ".spec.nics[*].vpc")}}
	for _, tt := range limitCases {
		t.Run(tt.name, func(t *testing.T) {
			// The VPCs exist: a reference to a missing one would add a
			// warning of its own.
			targets := &fakeTargets{objects: map[string]kcp.Meta{}}
			for i := range 30 {
				name := fmt.Sprintf("vpc-%d", i)
				targets.objects["consumer|default/"+name] = kcp.Meta{Namespace: "default", Name: name}
			}
			v := NewReferenceValidator(guards, loaded(true), targets, recordsVerifier{}, 0, nil, WithMaxReferences(10))
			req := writeRequest("default", "vm-1", tt.spec, tt.old, false)
			req.DryRun = ptr.To(tt.dryRun)
			checkLimitResponse(t, v.Handle(webhook.WithProvider(context.Background(), provider), req), tt.wantRefused, tt.wantWarning)
			if got := len(targets.Calls()); got != tt.wantChecked {
				t.Errorf("%d targets read, want %d", got, tt.wantChecked)
			}
		})
	}
}

func TestLabelMutatorLimit(t *testing.T) {
	scheme := vmLabelScheme(t)
	labelling := &fakeLabelling{labellings: map[registry.Target]registry.Labelling{vmsOfProvider: {Scheme: scheme, Labellable: true}}}
	for _, tt := range limitCases {
		t.Run(tt.name, func(t *testing.T) {
			ledgers := &fakeLedgers{}
			m := NewLabelMutator(labelling, loaded(true), nil, WithRecording(Recording{
				Guards:  staticGuards{vms.GroupResource(): {vmGuard(targetSource, ".spec.vpcRef.name", ".spec.nics[*].vpc")}},
				Targets: &fakeTargets{}, Ledgers: ledgers, IDs: inflight.NewIDs(nil),
				Landed: func(index.Source) inflight.Landed {
					return func(string) (time.Time, bool) { return time.Time{}, false }
				},
				MaxReferences: 10,
			}))
			req := labelRequest(t, admissionv1.Create, nil, nil, tt.spec)
			if tt.old != nil {
				req = labelRequest(t, admissionv1.Update, nil, nil, tt.spec)
				req.OldObject.Raw = labelObject(t, nil, tt.old)
			}
			req.DryRun = ptr.To(tt.dryRun)
			resp := m.Handle(webhook.WithEndpoint(webhook.WithProvider(context.Background(), provider), webhook.EndpointLabels, scheme.Fingerprint), req)
			checkLimitResponse(t, resp, tt.wantRefused, tt.wantWarning)
			want := tt.wantChecked
			if tt.dryRun {
				want = 0 // a dry run records nothing
			}
			if got := len(ledgers.marks); got != want {
				t.Errorf("%d targets recorded, want %d", got, want)
			}
		})
	}
}

// checkLimitResponse checks that resp refuses with wantRefused in its
// message (if set) or else allows, with wantWarning among its warnings (or
// none if empty).
func checkLimitResponse(t *testing.T, resp admission.Response, wantRefused, wantWarning string) {
	t.Helper()
	if wantRefused != "" {
		if resp.Allowed || resp.Result.Code != http.StatusForbidden || !strings.Contains(resp.Result.Message, wantRefused) {
			t.Fatalf("response %+v; want a 403 with %q", resp.Result, wantRefused)
		}
		return
	}
	if !resp.Allowed {
		t.Fatalf("refused: %+v", resp.Result)
	}
	switch {
	case wantWarning == "" && len(resp.Warnings) > 0:
		t.Errorf("warnings %q, want none", resp.Warnings)
	case wantWarning != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], wantWarning)):
		t.Errorf("warnings %q, want one with %q", resp.Warnings, wantWarning)
	}
	for _, w := range resp.Warnings {
		if len(w) > 256 {
			t.Errorf("warning of %d characters; kcp truncates past 256", len(w))
		}
	}
}

// manyCases are writes of a VirtualMachine with 250 new references to
// VPCs vpc-0 to vpc-249, each read (a GET or a page of a LIST) or write
// taking 20 ms: one at a time that is 5 s, past the budget of 1 s.
var manyCases = []struct {
	name string
	// terminating and failing are the VPCs being deleted, and those that
	// cannot be read or recorded.
	terminating, failing []string
	wantCode             int32
	wantMessage          string
}{
	{name: "every target is read or recorded within the budget"},
	{name: "a target being deleted among them is refused, naming it",
		terminating: []string{"vpc-150"}, wantCode: http.StatusForbidden, wantMessage: `VirtualMachine "vm-1" cannot reference vpcs "vpc-150"`},
	{name: "of many targets being deleted, ten are named and the rest counted",
		terminating: []string{"vpc-1", "vpc-2", "vpc-3", "vpc-4", "vpc-5", "vpc-6", "vpc-7", "vpc-8", "vpc-9", "vpc-10", "vpc-11", "vpc-12"},
		wantCode:    http.StatusForbidden, wantMessage: `cannot reference vpcs "vpc-10"`},
	{name: "a target that cannot be read or recorded refuses the write, to be retried",
		failing: []string{"vpc-42"}, wantCode: http.StatusServiceUnavailable, wantMessage: "boom"},
}

// manyLayouts are where the 250 VPCs of manyCases are: all in the
// VirtualMachine's namespace (read with one LIST), or each in a namespace
// of its own (read one by one, in parallel).
var manyLayouts = []struct {
	name   string
	spread bool
	guard  func(index.Source) registry.Guard
	// wantReads are the reads of the validator.
	wantReads func(n int) []string
}{
	{name: "in one namespace", guard: func(s index.Source) registry.Guard { return vmGuard(s, ".spec.nics[*].vpc") },
		wantReads: func(int) []string { return []string{"consumer vpcs list default"} }},
	{name: "one per namespace", spread: true, guard: parentsGuard,
		wantReads: func(n int) []string {
			var out []string
			for i := range n {
				out = append(out, fmt.Sprintf("consumer vpcs ns-%d/vpc-%d", i, i))
			}
			return out
		}},
}

func TestManyReferencesWithinTheBudget(t *testing.T) {
	const n, delay, budget = 250, 20 * time.Millisecond, time.Second
	for _, layout := range manyLayouts {
		namespace := func(i int) string {
			if layout.spread {
				return fmt.Sprintf("ns-%d", i)
			}
			return "default"
		}
		spec := nics(0, n, false)
		if layout.spread {
			var parents []any
			for i := range n {
				parents = append(parents, map[string]any{"name": fmt.Sprintf("vpc-%d", i), "namespace": namespace(i)})
			}
			spec = map[string]any{"parents": parents}
		}
		for _, tt := range manyCases {
			set := func(names []string) map[string]bool {
				m := map[string]bool{}
				for _, s := range names {
					m[s] = true
				}
				return m
			}
			terminating := set(tt.terminating)
			objects := map[string]kcp.Meta{}
			for i := range n {
				name := fmt.Sprintf("vpc-%d", i)
				objects[fmt.Sprintf("consumer|%s/%s", namespace(i), name)] = kcp.Meta{Namespace: namespace(i), Name: name, Terminating: terminating[name]}
			}
			guards := staticGuards{vms.GroupResource(): {layout.guard(targetSource)}}
			t.Run(layout.name+", validator: "+tt.name, func(t *testing.T) {
				targets := &fakeTargets{objects: objects, delay: delay, err: errors.New("boom"), failing: set(tt.failing)}
				v := NewReferenceValidator(guards, loaded(true), targets, recordsVerifier{}, budget, nil)
				start := time.Now()
				resp := v.Handle(webhook.WithProvider(context.Background(), provider), writeRequest("default", "vm-1", spec, nil, false))
				checkManyResponse(t, resp, time.Since(start), budget, tt.wantCode, tt.wantMessage)
				if want := layout.wantReads(n); tt.wantCode != http.StatusServiceUnavailable && fmt.Sprint(targets.Calls()) != fmt.Sprint(slices.Sorted(slices.Values(want))) {
					t.Errorf("%d reads, want %d", len(targets.Calls()), len(want))
				}
			})
			t.Run(layout.name+", labelling: "+tt.name, func(t *testing.T) {
				scheme := vmLabelScheme(t)
				ledgers := &fakeLedgers{delay: delay, terminating: map[string]bool{}, err: errors.New("boom"), failing: set(tt.failing)}
				for i := range n {
					if name := fmt.Sprintf("vpc-%d", i); terminating[name] {
						ledgers.terminating[namespace(i)+"/"+name] = true
					}
				}
				m := NewLabelMutator(&fakeLabelling{labellings: map[registry.Target]registry.Labelling{vmsOfProvider: {Scheme: scheme, Labellable: true}}}, loaded(true), nil,
					WithRecording(Recording{
						Guards: guards, Targets: &fakeTargets{objects: objects, delay: delay}, Ledgers: ledgers, IDs: inflight.NewIDs(nil),
						Landed: func(index.Source) inflight.Landed {
							return func(string) (time.Time, bool) { return time.Time{}, false }
						},
						Records: validRecords{}, Timeout: budget,
					}))
				req := labelRequest(t, admissionv1.Create, nil, nil, spec)
				start := time.Now()
				resp := m.Handle(webhook.WithEndpoint(webhook.WithProvider(context.Background(), provider), webhook.EndpointLabels, scheme.Fingerprint), req)
				checkManyResponse(t, resp, time.Since(start), budget, tt.wantCode, tt.wantMessage)
				if wantPrimed := map[bool]int{false: n, true: 0}[layout.spread]; len(ledgers.primed) != wantPrimed {
					t.Errorf("%d targets primed from a LIST, want %d", len(ledgers.primed), wantPrimed)
				}
				if tt.wantCode != 0 {
					return
				}
				id := applyPatches(t, req.Object.Raw, resp)[depv1alpha1.LabelAdmission]
				if len(ledgers.marks) != n {
					t.Errorf("%d targets recorded, want %d", len(ledgers.marks), n)
				}
				for target, ids := range ledgers.marks {
					if len(ids) != 1 || ids[0] != id {
						t.Errorf("%s marked %v, want once with the admission id %q", target, ids, id)
					}
				}
			})
		}
	}
}

// checkManyResponse checks that resp, answered after took, came within the
// budget, and refuses with wantCode and wantMessage (allows if 0).
func checkManyResponse(t *testing.T, resp admission.Response, took, budget time.Duration, wantCode int32, wantMessage string) {
	t.Helper()
	if took > budget {
		t.Errorf("answered after %s, past the budget of %s", took, budget)
	}
	if wantCode == 0 {
		if !resp.Allowed {
			t.Fatalf("refused: %+v", resp.Result)
		}
		return
	}
	if resp.Allowed || resp.Result.Code != wantCode || !strings.Contains(resp.Result.Message, wantMessage) {
		t.Fatalf("response %+v; want code %d with %q", resp.Result, wantCode, wantMessage)
	}
}
