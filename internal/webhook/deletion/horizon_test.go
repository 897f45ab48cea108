package deletion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// fakeCurrency emulates what the index knows of how current it is: the
// currency of each dependent resource, and the admission ids it has seen;
// land, if set, is what lands while a decision waits (the dependent joins
// the index, and its id is seen).
type fakeCurrency struct {
	lock     sync.Mutex
	current  map[schema.GroupVersionResource]time.Time
	admitted map[string]time.Time
	// progressed is the resourceVersion up to which the index has stored
	// every dependent.
	progressed uint64
	land       func()
	waited     int
}

func (f *fakeCurrency) Progressed(_ index.Source, _ logicalcluster.Name, rv uint64) bool {
	return rv != 0 && rv <= f.progressed
}

func (f *fakeCurrency) Currency(src index.Source, _ logicalcluster.Name) (time.Time, bool) {
	t, ok := f.current[src.Resource]
	return t, ok
}

func (f *fakeCurrency) Admitted(_ index.Source, id string) (time.Time, bool) {
	f.lock.Lock()
	defer f.lock.Unlock()
	t, ok := f.admitted[id]
	return t, ok
}

func (f *fakeCurrency) WaitAdmitted(ctx context.Context, src index.Source, id string) (time.Time, bool) {
	f.lock.Lock()
	f.waited++
	land := f.land
	f.land = nil
	f.lock.Unlock()
	if land != nil {
		land()
	}
	if t, ok := f.Admitted(src, id); ok {
		return t, true
	}
	<-ctx.Done()
	return time.Time{}, false
}

func (f *fakeCurrency) Dependent(src index.Source, cluster logicalcluster.Name) (string, kcp.Meta, bool) {
	return "https://shard-1/vw/" + src.Resource.Resource, kcp.Meta{Cluster: cluster, Namespace: "default", Name: "any-dependent"}, true
}

func (f *fakeCurrency) ServingURL(src index.Source, _ logicalcluster.Name) (string, bool) {
	return "https://shard-1/vw/" + src.Resource.Resource, true
}

// fakeActivation says every webhook has been in effect since since, unless
// it is zero.
type fakeActivation struct {
	since time.Time
	keys  []tracking.Key
}

func (f *fakeActivation) Since(_ context.Context, key tracking.Key, _ tracking.Object) (time.Time, bool) {
	f.keys = append(f.keys, key)
	return f.since, !f.since.IsZero()
}

// schemedRules are rules whose dependents are labelled under the scheme
// "s1".
type schemedRules struct{ staticRules }

func (r schemedRules) Labelling(t registry.Target) (registry.Labelling, bool) {
	for _, entries := range r.staticRules {
		for _, e := range entries {
			if e.Dependent.Export.Cluster == t.Cluster && e.Dependent.Resource.GroupResource() == t.Resource {
				return registry.Labelling{Dependent: e.Dependent, Scheme: reflabels.Scheme{Fingerprint: "s1", Salt: "salt1"}, Labellable: true, Labelled: true}, true
			}
		}
	}
	return registry.Labelling{}, false
}

// withLedger returns a DELETE request of vpc-a created at created, with the
// ledger.
func withLedger(t *testing.T, created time.Time, ledger inflight.Ledger) []byte {
	t.Helper()
	req := deleteRequest(vpcs, consumer, "default", "vpc-a", map[string]string{depv1alpha1.AnnotationAdmittedReferences: ledger.String()})
	var obj map[string]any
	if err := json.Unmarshal(req.OldObject.Raw, &obj); err != nil {
		t.Fatal(err)
	}
	obj["metadata"].(map[string]any)["creationTimestamp"] = created.UTC().Format(time.RFC3339)
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// withRecord returns the object raw with a deletion record.
func withRecord(t *testing.T, raw []byte, record string) []byte {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	meta := obj["metadata"].(map[string]any)
	meta["labels"] = map[string]any{depv1alpha1.LabelDeletionRequested: "true"}
	meta["annotations"].(map[string]any)[depv1alpha1.AnnotationDeletionRequest] = record
	out, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHorizon(t *testing.T) {
	now := time.Now()
	old := now.Add(-time.Hour)
	id1, id2 := inflight.NewIDs(nil).New("vm-1", now), inflight.NewIDs(nil).New("vm-2", now)
	tracked := registry.Tracking{Status: metav1.ConditionTrue, Since: old}
	rules := func(tracking registry.Tracking, replay bool) schemedRules {
		e := entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name")
		e.Tracking, e.Replay = tracking, replay
		return schemedRules{staticRules{vpcs.GroupResource(): {e}}}
	}
	vm := func(name string) map[string]any {
		return object("default", name, map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}})
	}
	tests := []struct {
		name    string
		rules   schemedRules
		created time.Time
		ledger  inflight.Ledger
		// record, if set, is the deletion record the object carries
		// ("valid" verifies; its resourceVersion is 7).
		record     string
		raw        []byte
		setup      func(*fakeDependents, *fakeCurrency)
		activation time.Time
		// resolved, if set, is the ledger of the object once its leases
		// ended (see horizon.Leases); with resolveFails, they do not.
		resolved     *inflight.Ledger
		resolveFails bool
		wantAllowed  bool
		wantCode     int32
		wantMessage  []string
		wantVia      string
		wantReads    int
	}{
		{
			name: "a lease on the object: decided on the object once it ended (alone, the lease is a floor in flight), its references landed: allowed without a read", rules: rules(tracked, false), created: old, activation: old,
			ledger:   inflight.Ledger{}.WithLease(inflight.NewReplica(), now),
			resolved: &inflight.Ledger{Marks: []inflight.Mark{{ID: id2, At: now.Add(-time.Second)}}},
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now}
				c.admitted[id2] = now.Add(-time.Second)
			},
			wantAllowed: true, wantVia: viaHorizon,
		},
		{
			name: "a lease that does not end: a reference in flight, refused", rules: rules(tracked, false), created: old, activation: old,
			ledger:       inflight.Ledger{}.WithLease(inflight.NewReplica(), now),
			resolveFails: true,
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now}
			},
			wantCode: http.StatusConflict, wantMessage: []string{"in flight"}, wantVia: viaLive, wantReads: 1,
		},
		{
			name: "an old object, never referenced, the index current: allowed without a read", rules: rules(tracked, false), created: old, activation: old,
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now.Add(-5 * time.Second)}
			},
			wantAllowed: true, wantVia: viaHorizon, wantReads: 0,
		},
		{
			name: "an old object last referenced long ago by a dependent since deleted: allowed without a read", rules: rules(tracked, false), created: old, activation: old,
			ledger: inflight.Ledger{Landed: old.Add(time.Minute)},
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now.Add(-5 * time.Second)}
			},
			wantAllowed: true, wantVia: viaHorizon,
		},
		{
			name: "the index not current past the object's creation: read, however far it has stored", rules: rules(tracked, false), created: now.Add(-30 * time.Second), activation: old,
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now.Add(-5 * time.Second)}
				c.progressed = 100
			},
			wantAllowed: true, wantVia: viaLive, wantReads: 1,
		},
		{
			name: "a young object whose deletion is deferred, the index past its revision: allowed without a read", rules: rules(tracked, true), created: now.Add(-30 * time.Second), activation: old,
			record: "valid", ledger: inflight.Ledger{Marks: []inflight.Mark{{ID: id2, At: now.Add(-20 * time.Second)}}},
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now.Add(-5 * time.Second)}
				c.admitted[id2] = now.Add(-20 * time.Second)
				c.progressed = 7
			},
			wantAllowed: true, wantVia: viaRevision,
		},
		{
			name: "a young object whose deletion is deferred, the index not yet past its revision: read", rules: rules(tracked, true), created: now.Add(-30 * time.Second), activation: old,
			record: "valid",
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now.Add(-5 * time.Second)}
				c.progressed = 6
			},
			wantAllowed: true, wantVia: viaLive, wantReads: 1,
		},
		{
			name: "a deferred deletion whose ledger records a reference that may have landed after the currency: read", rules: rules(tracked, true), created: now.Add(-2 * time.Minute), activation: old,
			record: "valid", ledger: inflight.Ledger{Marks: []inflight.Mark{{ID: id1, At: now.Add(-inflight.MaxInFlight - time.Second)}}},
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now.Add(-5 * time.Second)}
				c.progressed = 100
			},
			wantAllowed: true, wantVia: viaLive, wantReads: 1,
		},
		{
			name: "a deferred deletion whose rules were tracked only a moment: read", rules: rules(registry.Tracking{Status: metav1.ConditionTrue, Since: now.Add(-time.Second)}, true), created: now.Add(-30 * time.Second), activation: old,
			record: "valid",
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now}
				c.progressed = 100
			},
			wantAllowed: true, wantVia: viaLive, wantReads: 1,
		},
		{
			name: "a record that does not verify: read", rules: rules(tracked, true), created: now.Add(-30 * time.Second), activation: old,
			record: "forged",
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now.Add(-5 * time.Second)}
				c.progressed = 100
			},
			wantAllowed: true, wantVia: viaLive, wantReads: 1,
		},
		{
			name: "references not tracked: read", rules: rules(registry.Tracking{Status: metav1.ConditionFalse, Since: old}, false), created: old, activation: old,
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now}
			},
			wantAllowed: true, wantVia: viaLive, wantReads: 1,
		},
		{
			name: "tracked only since a moment: read", rules: rules(registry.Tracking{Status: metav1.ConditionTrue, Since: now.Add(-time.Second)}, false), created: old, activation: old,
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now}
			},
			wantAllowed: true, wantVia: viaLive, wantReads: 1,
		},
		{
			name: "the webhooks not known to be in effect on the shard: read", rules: rules(tracked, false), created: old,
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now}
			},
			wantAllowed: true, wantVia: viaLive, wantReads: 1,
		},
		{
			name: "a reference in flight that lands while the DELETE waits: denied from the index", rules: rules(tracked, false), created: old, activation: old,
			ledger: inflight.Ledger{Marks: []inflight.Mark{{ID: id1, At: now}}},
			setup: func(d *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now}
				c.land = func() {
					d.add(consumer, vms, vm("vm-1"))
					c.lock.Lock()
					c.admitted[id1] = time.Now()
					c.lock.Unlock()
				}
			},
			wantCode: http.StatusForbidden, wantMessage: []string{"still referenced by VirtualMachine/default/vm-1"}, wantVia: viaIndex,
		},
		{
			name: "a reference in flight whose dependent was stored, which the index has not seen: denied by the read", rules: rules(tracked, false), created: old, activation: old,
			ledger: inflight.Ledger{Marks: []inflight.Mark{{ID: id1, At: now}}},
			setup: func(d *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now}
				d.addLive(vms, vm("vm-1"))
			},
			wantCode: http.StatusForbidden, wantMessage: []string{"still referenced by VirtualMachine/default/vm-1"}, wantVia: viaLive, wantReads: 1,
		},
		{
			name: "a reference in flight that neither lands nor is found: refused, saying when to retry", rules: rules(tracked, false), created: old, activation: old,
			ledger: inflight.Ledger{Marks: []inflight.Mark{{ID: id1, At: now}}},
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now}
			},
			wantCode: http.StatusConflict, wantMessage: []string{`vpcs "vpc-a" in namespace "default" may be referenced by a VirtualMachine whose create or update is in flight`, "retry in 1m"},
			wantVia: viaLive, wantReads: 1,
		},
		{
			name: "a reference that landed, its dependent deleted since: allowed as the other references say", rules: rules(tracked, false), created: old, activation: old,
			ledger: inflight.Ledger{Marks: []inflight.Mark{{ID: id2, At: now.Add(-time.Second)}}},
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now}
				c.admitted[id2] = now.Add(-time.Second)
			},
			wantAllowed: true, wantVia: viaHorizon,
		},
		{
			name: "references folded into a recent floor may be in flight: refused", rules: rules(tracked, false), created: old, activation: old,
			ledger: inflight.Ledger{Floor: now.Add(-time.Second)},
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now}
			},
			wantCode: http.StatusConflict, wantMessage: []string{"in flight"}, wantVia: viaLive, wantReads: 1,
		},
		{
			name: "a ledger that does not parse: read, as without one", rules: rules(tracked, false), created: old, activation: old,
			raw: func() []byte {
				req := deleteRequest(vpcs, consumer, "default", "vpc-a", map[string]string{depv1alpha1.AnnotationAdmittedReferences: "v9 nonsense"})
				return req.OldObject.Raw
			}(),
			setup: func(_ *fakeDependents, c *fakeCurrency) {
				c.current = map[schema.GroupVersionResource]time.Time{vms: now}
			},
			wantAllowed: true, wantVia: viaLive, wantReads: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{}
			cur := &fakeCurrency{admitted: map[string]time.Time{}}
			if tt.setup != nil {
				tt.setup(deps, cur)
			}
			act := &fakeActivation{since: tt.activation}
			var leases *fakeLeases
			if tt.resolved != nil || tt.resolveFails {
				leases = &fakeLeases{fails: tt.resolveFails}
				if tt.resolved != nil {
					leases.raw = withLedger(t, tt.created, *tt.resolved)
				}
			}
			v := NewValidator(tt.rules, loaded(true), deps, WithHorizon(cur, act, leases), WithRecorder(&fakeRecorder{}), WithTimeout(5*time.Second))
			req := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
			req.OldObject.Raw = tt.raw
			if tt.raw == nil {
				req.OldObject.Raw = withLedger(t, tt.created, tt.ledger)
			}
			if tt.record != "" {
				req.OldObject.Raw = withRecord(t, req.OldObject.Raw, tt.record)
			}
			resp, d := v.handle(webhook.WithProvider(context.Background(), provider), req)
			if resp.Allowed != tt.wantAllowed {
				t.Fatalf("allowed = %v, want %v (result %+v)", resp.Allowed, tt.wantAllowed, resp.Result)
			}
			if !tt.wantAllowed {
				if resp.Result.Code != tt.wantCode {
					t.Errorf("code = %d, want %d (%s)", resp.Result.Code, tt.wantCode, resp.Result.Message)
				}
				for _, want := range tt.wantMessage {
					if !strings.Contains(resp.Result.Message, want) {
						t.Errorf("message %q does not contain %q", resp.Result.Message, want)
					}
				}
			}
			if d.via != tt.wantVia {
				t.Errorf("via = %q, want %q", d.via, tt.wantVia)
			}
			if len(deps.calls) != tt.wantReads {
				t.Errorf("live reads %v, want %d", deps.calls, tt.wantReads)
			}
			if leases != nil && leases.calls != 1 {
				t.Errorf("the leases were resolved %d times, want once", leases.calls)
			}
		})
	}
}

// fakeLeases answers Resolve with raw, or fails.
type fakeLeases struct {
	raw   []byte
	fails bool
	calls int
}

func (l *fakeLeases) Resolve(_ context.Context, t inflight.Target, leases []inflight.Lease) ([]byte, error) {
	l.calls++
	if t.Name != "vpc-a" || t.Namespace != "default" || len(leases) == 0 {
		return nil, fmt.Errorf("unexpected Resolve of %+v with %v", t, leases)
	}
	if l.fails {
		return nil, errors.New("the lease did not end")
	}
	return l.raw, nil
}

// Under a Replay rule, a DELETE held up by a reference in flight is deferred
// like one held up by a blocker.
func TestHorizonDefersUnderReplay(t *testing.T) {
	now := time.Now()
	e := entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name")
	e.Replay = true
	rules := schemedRules{staticRules{vpcs.GroupResource(): {e}}}
	deps := &fakeDependents{}
	recs := &fakeRecorder{}
	v := NewValidator(rules, loaded(true), deps, WithHorizon(&fakeCurrency{admitted: map[string]time.Time{}}, &fakeActivation{}, nil), WithRecorder(recs), WithTimeout(3*time.Second))
	req := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
	req.OldObject.Raw = withLedger(t, now.Add(-time.Hour), inflight.Ledger{Marks: []inflight.Mark{{ID: inflight.NewIDs(nil).New("vm", now), At: now}}})
	resp := v.Handle(webhook.WithProvider(context.Background(), provider), req)
	if resp.Allowed || resp.Result.Code != http.StatusConflict || !strings.Contains(resp.Result.Message, "its deletion is deferred") {
		t.Fatalf("response %+v; want a refusal that defers", resp.Result)
	}
	if len(recs.recorded) != 1 || resp.AuditAnnotations[AuditDeferred] != "true" {
		t.Errorf("recorded %d deletions, audit %v; want one", len(recs.recorded), resp.AuditAnnotations)
	}
}

// unlabellableRules are rules whose dependents cannot be labelled (a
// reference in the status): the check of new references records their
// references.
type unlabellableRules struct{ staticRules }

func (r unlabellableRules) Labelling(registry.Target) (registry.Labelling, bool) {
	return registry.Labelling{Reason: "a reference in the status"}, true
}

// The allowed DELETE of an object whose dependents cannot be labelled is
// decided from the horizon once the check of new references, which records
// their references, is seen in effect for the references that can name the
// object; the labelling webhook, which such a type does not have, is never
// asked about.
func TestHorizonOfTypesThatCannotBeLabelled(t *testing.T) {
	now := time.Now()
	old := now.Add(-time.Hour)
	paths := []string{".status.vpc", ".spec.vpcRef.name"}
	checked := []fieldpath.Reference{fieldpathtest.MustParse(paths[0]), fieldpathtest.MustParse(paths[1])}
	rules := func(tracking registry.Tracking) unlabellableRules {
		e := entry("p/appliance", vms, "Appliance", paths...)
		e.Tracking = tracking
		return unlabellableRules{staticRules{vpcs.GroupResource(): {e}}}
	}
	tracked := registry.Tracking{Status: metav1.ConditionTrue, Since: old}
	tests := []struct {
		name       string
		rules      unlabellableRules
		activation time.Time
		wantVia    string
		wantReads  int
	}{
		{"tracked, the check in effect, the index current: allowed without a read", rules(tracked), old, viaHorizon, 0},
		{"tracked, the check not known to be in effect: read", rules(tracked), time.Time{}, viaLive, 1},
		{"the check in effect only a moment: read", rules(tracked), now.Add(-time.Second), viaLive, 1},
		{"not tracked: read", rules(registry.Tracking{Status: metav1.ConditionUnknown, Since: old}), old, viaLive, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{}
			cur := &fakeCurrency{admitted: map[string]time.Time{}, current: map[schema.GroupVersionResource]time.Time{vms: now.Add(-5 * time.Second)}}
			act := &fakeActivation{since: tt.activation}
			v := NewValidator(tt.rules, loaded(true), deps, WithHorizon(cur, act, nil), WithTimeout(5*time.Second))
			req := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
			req.OldObject.Raw = withLedger(t, old, inflight.Ledger{})
			resp, d := v.handle(webhook.WithProvider(context.Background(), provider), req)
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			if d.via != tt.wantVia {
				t.Errorf("via = %q, want %q", d.via, tt.wantVia)
			}
			if len(deps.calls) != tt.wantReads {
				t.Errorf("live reads %v, want %d", deps.calls, tt.wantReads)
			}
			for _, key := range act.keys {
				if key.Kind == tracking.KindLabelling {
					t.Errorf("asked about the labelling webhook of a type that has none: %+v", key)
				}
			}
			// Asked once the guard is in effect and the rules tracked.
			if !tt.activation.IsZero() && tt.rules.staticRules[vpcs.GroupResource()][0].Tracking.Status == metav1.ConditionTrue &&
				!slices.ContainsFunc(act.keys, func(k tracking.Key) bool {
					return k.Kind == tracking.KindCheck && k.Scheme == tracking.CheckScheme(checked)
				}) {
				t.Errorf("never asked about the check of new references for %v: asked %+v", paths, act.keys)
			}
		})
	}
}
