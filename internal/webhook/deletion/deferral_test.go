package deletion

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/records"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// fakeRecorder records what Record was asked to record; records whose
// annotation is "valid" verify.
type fakeRecorder struct {
	recordsVerifier
	err      error
	recorded []string
	requests []depv1alpha1.DeletionRequest
}

func (f *fakeRecorder) Record(_ context.Context, target index.Source, obj kcp.Meta, request depv1alpha1.DeletionRequest) error {
	if f.err != nil {
		return f.err
	}
	f.recorded = append(f.recorded, target.Resource.Resource+" "+obj.Cluster.String()+"/"+obj.Namespace+"/"+obj.Name+" uid="+string(obj.UID)+" rv="+obj.ResourceVersion)
	f.requests = append(f.requests, request)
	return nil
}

// replayEntry is entry with the Replay deletion policy and the target's
// source.
func replayEntry(e registry.Entry) registry.Entry {
	e.Replay = true
	return e
}

func withTarget(e registry.Entry) registry.Entry {
	e.Target = index.Source{Export: kcp.ObjectKey{Cluster: provider, Name: "network"}, Resource: vpcs}
	return e
}

func TestDeletionsUnderReplayRulesAreDeferred(t *testing.T) {
	vmRefs := func(vpc string) map[string]any { return map[string]any{"vpcRef": map[string]any{"name": vpc}} }
	dbRefs := func(vpc string) map[string]any { return map[string]any{"network": vpc} }
	replayVMs := withTarget(replayEntry(entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name")))
	denyDBs := withTarget(entry("p/db", dbs, "Database", ".spec.network"))
	replayOnly := staticRules{vpcs.GroupResource(): {replayVMs}}
	mixed := staticRules{vpcs.GroupResource(): {denyDBs, replayVMs}}
	req := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
	foreground := func(r admission.Request) admission.Request {
		r.Options = runtime.RawExtension{Raw: []byte(`{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1","propagationPolicy":"Foreground"}`)}
		return r
	}

	tests := []struct {
		name         string
		rules        staticRules
		req          admission.Request
		setup        func(*fakeDependents)
		recorderErr  error
		noRecorder   bool
		wantAllowed  bool
		wantMessage  []string
		wantNot      []string
		wantRecorded []string
		wantDeferred bool
		wantPolicy   *metav1.DeletionPropagation
	}{
		{
			name: "a referenced object is recorded, with the request's propagation policy", rules: replayOnly, req: foreground(req),
			setup:        func(f *fakeDependents) { f.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a"))) },
			wantMessage:  []string{"still referenced by VirtualMachine/default/vm-1", "its deletion is deferred: it will be deleted once its dependent is gone", "remove its label " + depv1alpha1.LabelDeletionRequested + " to cancel"},
			wantRecorded: []string{"vpcs consumer/default/vpc-a uid=uid-default-vpc-a rv=7"},
			wantDeferred: true, wantPolicy: ptr.To(metav1.DeletePropagationForeground),
		},
		{
			name: "a dependent found by the live read defers too, counting the dependents", rules: replayOnly, req: req,
			setup: func(f *fakeDependents) {
				f.addLive(vms, object("default", "vm-1", vmRefs("vpc-a")), object("default", "vm-2", vmRefs("vpc-a")))
			},
			wantMessage:  []string{"it will be deleted once its 2 dependents are gone"},
			wantRecorded: []string{"vpcs consumer/default/vpc-a uid=uid-default-vpc-a rv=7"},
			wantDeferred: true,
		},
		{
			name: "an unreferenced object is deleted at once, nothing recorded", rules: replayOnly, req: req,
			wantAllowed: true,
		},
		{
			name: "a dry run records nothing", rules: replayOnly,
			req: func() admission.Request {
				r := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
				r.DryRun = ptr.To(true)
				return r
			}(),
			setup:       func(f *fakeDependents) { f.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a"))) },
			wantMessage: []string{"its deletion would be deferred until its dependent is gone"},
			wantNot:     []string{"is deferred:"},
		},
		{
			name: "an object already recorded is not written again", rules: replayOnly,
			req: func() admission.Request {
				r := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
				var obj map[string]any
				_ = json.Unmarshal(r.OldObject.Raw, &obj)
				obj["metadata"].(map[string]any)["labels"] = map[string]any{depv1alpha1.LabelDeletionRequested: "true"}
				obj["metadata"].(map[string]any)["annotations"].(map[string]any)[depv1alpha1.AnnotationDeletionRequest] = "valid"
				r.OldObject.Raw, _ = json.Marshal(obj)
				return r
			}(),
			setup: func(f *fakeDependents) { f.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a"))) },
			// The same answer: the DELETE that recorded it is admitted again
			// by kcp on the recorded state.
			wantMessage:  []string{"its deletion is deferred: it will be deleted once its dependent is gone"},
			wantDeferred: true,
		},
		{
			name: "an object whose record does not verify is recorded anew", rules: replayOnly,
			req: func() admission.Request {
				r := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
				var obj map[string]any
				_ = json.Unmarshal(r.OldObject.Raw, &obj)
				obj["metadata"].(map[string]any)["labels"] = map[string]any{depv1alpha1.LabelDeletionRequested: "true"}
				obj["metadata"].(map[string]any)["annotations"].(map[string]any)[depv1alpha1.AnnotationDeletionRequest] = `{"user":"mallory"}`
				r.OldObject.Raw, _ = json.Marshal(obj)
				return r
			}(),
			setup:        func(f *fakeDependents) { f.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a"))) },
			wantMessage:  []string{"its deletion is deferred: it will be deleted once its dependent is gone"},
			wantRecorded: []string{"vpcs consumer/default/vpc-a uid=uid-default-vpc-a rv=7"},
			wantDeferred: true,
		},
		{
			name: "a blocker under a rule that denies keeps the plain denial", rules: mixed, req: req,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a")))
				f.add(consumer, dbs, object("default", "db-1", dbRefs("vpc-a")))
			},
			wantMessage: []string{"Database/default/db-1", "VirtualMachine/default/vm-1", "delete these or remove their references first"},
			wantNot:     []string{"deferred"},
		},
		{
			name: "blockers only under the rule that replays defer, whatever other rules say", rules: mixed, req: req,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a")))
				f.add(consumer, dbs, object("default", "db-1", dbRefs("vpc-b")))
			},
			wantMessage:  []string{"its deletion is deferred"},
			wantRecorded: []string{"vpcs consumer/default/vpc-a uid=uid-default-vpc-a rv=7"},
			wantDeferred: true,
		},
		{
			name: "a failed record is said, and the delete is denied as under Deny", rules: replayOnly, req: req,
			setup:       func(f *fakeDependents) { f.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a"))) },
			recorderErr: errors.New("forbidden: cannot patch"),
			wantMessage: []string{"VirtualMachine/default/vm-1", "its deletion could not be deferred (forbidden: cannot patch)"},
		},
		{
			name: "an item of kcp's teardown is not recorded", rules: replayOnly, req: teardownItem(req),
			setup:   func(f *fakeDependents) { f.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a"))) },
			wantNot: []string{"deferred"},
		},
		{
			name: "without a recorder, nothing is deferred", rules: replayOnly, req: req, noRecorder: true,
			setup:   func(f *fakeDependents) { f.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a"))) },
			wantNot: []string{"deferred"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{}
			if tt.setup != nil {
				tt.setup(deps)
			}
			rec := &fakeRecorder{err: tt.recorderErr}
			opts := []Option{WithNamespaces(deps)}
			if !tt.noRecorder {
				opts = append(opts, WithRecorder(rec))
			}
			v := NewValidator(tt.rules, loaded(true), deps, opts...)
			resp := v.Handle(webhook.WithProvider(context.Background(), provider), tt.req)
			if resp.Allowed != tt.wantAllowed {
				t.Fatalf("allowed = %v, want %v (result %+v)", resp.Allowed, tt.wantAllowed, resp.Result)
			}
			if resp.Allowed {
				if len(rec.recorded) > 0 {
					t.Errorf("recorded %v on an allowed delete", rec.recorded)
				}
				return
			}
			if resp.Result.Code != http.StatusForbidden {
				t.Errorf("code = %d, want 403", resp.Result.Code)
			}
			for _, m := range tt.wantMessage {
				if !strings.Contains(resp.Result.Message, m) {
					t.Errorf("message %q does not contain %q", resp.Result.Message, m)
				}
			}
			for _, m := range tt.wantNot {
				if strings.Contains(resp.Result.Message, m) {
					t.Errorf("message %q contains %q", resp.Result.Message, m)
				}
			}
			if strings.Join(rec.recorded, "; ") != strings.Join(tt.wantRecorded, "; ") {
				t.Errorf("recorded %v, want %v", rec.recorded, tt.wantRecorded)
			}
			if got := resp.AuditAnnotations[AuditDeferred] == "true"; got != tt.wantDeferred {
				t.Errorf("audit %s = %q, want deferred %v", AuditDeferred, resp.AuditAnnotations[AuditDeferred], tt.wantDeferred)
			}
			for _, r := range rec.requests {
				if r.User != "alice" || r.RequestedAt.IsZero() {
					t.Errorf("request %+v does not name the user and the time", r)
				}
				if (r.PropagationPolicy == nil) != (tt.wantPolicy == nil) || r.PropagationPolicy != nil && *r.PropagationPolicy != *tt.wantPolicy {
					t.Errorf("propagation policy %v, want %v", r.PropagationPolicy, tt.wantPolicy)
				}
			}
		})
	}
}

func TestReferencedAsksTheIndexOnly(t *testing.T) {
	vmRefs := func(vpc string) map[string]any { return map[string]any{"vpcRef": map[string]any{"name": vpc}} }
	rules := staticRules{vpcs.GroupResource(): {withTarget(replayEntry(entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name")))}}
	deps := &fakeDependents{}
	deps.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a")), terminating(object("default", "vm-2", vmRefs("vpc-c"))))
	deps.addLive(vms, object("default", "vm-3", vmRefs("vpc-b")))
	v := NewValidator(rules, loaded(true), deps, WithNamespaces(deps))
	target := index.Source{Export: kcp.ObjectKey{Cluster: provider, Name: "network"}, Resource: vpcs}
	for _, tt := range []struct {
		obj  kcp.Meta
		want bool
	}{
		{kcp.Meta{Cluster: consumer, Namespace: "default", Name: "vpc-a"}, true},
		{kcp.Meta{Cluster: consumer, Namespace: "other", Name: "vpc-a"}, false},
		{kcp.Meta{Cluster: "elsewhere", Namespace: "default", Name: "vpc-a"}, false},
		// Only a live read would find vm-3: a miss is no proof.
		{kcp.Meta{Cluster: consumer, Namespace: "default", Name: "vpc-b"}, false},
		// A dependent being deleted does not count.
		{kcp.Meta{Cluster: consumer, Namespace: "default", Name: "vpc-c"}, false},
	} {
		if got := v.Referenced(target, tt.obj); got != tt.want {
			t.Errorf("Referenced(%+v) = %v, want %v", tt.obj, got, tt.want)
		}
	}
	if len(deps.calls) != 0 {
		t.Errorf("Referenced read live: %v", deps.calls)
	}
	// Another provider's resource of the same name is not protected here.
	other := target
	other.Export.Cluster = "other-provider"
	if v.Referenced(other, kcp.Meta{Cluster: consumer, Namespace: "default", Name: "vpc-a"}) {
		t.Error("Referenced under another provider's rules")
	}
}

// recordsVerifier verifies the records whose annotation is "valid".
type recordsVerifier struct{}

func (recordsVerifier) Verify(_ schema.GroupResource, obj kcp.Meta) error {
	if obj.DeletionRequested && obj.DeletionRecord == "valid" {
		return nil
	}
	return &records.Error{Problem: records.ProblemBadSignature}
}
