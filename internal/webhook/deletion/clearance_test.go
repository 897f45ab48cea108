package deletion

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
)

// A clearance is decided as the DELETE would be, but only an allowance
// from the horizon counts: nothing is read live, recorded or deferred.
func TestClearance(t *testing.T) {
	now := time.Now()
	old := now.Add(-time.Hour)
	tracked := registry.Tracking{Status: metav1.ConditionTrue, Since: old}
	rules := func(tracking registry.Tracking) schemedRules {
		e := entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name")
		e.Tracking, e.Replay = tracking, true
		return schemedRules{staticRules{vpcs.GroupResource(): {e}}}
	}
	current := func(_ *fakeDependents, c *fakeCurrency) {
		c.current = map[schema.GroupVersionResource]time.Time{vms: now.Add(-5 * time.Second)}
	}
	fingerprint := reflabels.ClearanceFingerprint(provider.String(), vpcs.GroupResource(), []reflabels.Scheme{{Fingerprint: "s1", Salt: "salt1"}})
	tests := []struct {
		name    string
		rules   schemedRules
		created time.Time
		ledger  inflight.Ledger
		setup   func(*fakeDependents, *fakeCurrency)
		want    string
	}{
		{"an old object, never referenced, the index current", rules(tracked), old, inflight.Ledger{}, current, fingerprint},
		{"last referenced long ago, cleared under another fingerprint before", rules(tracked), old,
			inflight.Ledger{Landed: old.Add(time.Minute), Clearance: inflight.Clearance("other", "uid")}, current, fingerprint},
		{"referenced by a dependent in the index", rules(tracked), old, inflight.Ledger{}, func(d *fakeDependents, c *fakeCurrency) {
			current(d, c)
			d.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
		}, ""},
		{"the index not current past the creation", rules(tracked), now.Add(-30 * time.Second), inflight.Ledger{}, current, ""},
		{"references not tracked", rules(registry.Tracking{Status: metav1.ConditionFalse, Since: old}), old, inflight.Ledger{}, current, ""},
		{"references folded into a recent floor", rules(tracked), old, inflight.Ledger{Floor: now.Add(-time.Second)}, current, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{}
			cur := &fakeCurrency{admitted: map[string]time.Time{}}
			tt.setup(deps, cur)
			recs := &fakeRecorder{}
			v := NewValidator(tt.rules, loaded(true), deps, WithHorizon(cur, &fakeActivation{since: old}, nil), WithRecorder(recs), WithTimeout(5*time.Second))
			got, why := v.Clearance(context.Background(), provider, vpcs, withLedger(t, tt.created, tt.ledger))
			if got != tt.want || (why == "") != (tt.want != "") {
				t.Errorf("Clearance = %q, %q; want %q", got, why, tt.want)
			}
			if fp, ok := v.ClearanceFingerprint(index.Source{Export: kcp.ObjectKey{Cluster: provider}, Resource: vpcs}); fp != fingerprint || !ok {
				t.Errorf("ClearanceFingerprint = %q, %v; want %q", fp, ok, fingerprint)
			}
			if len(deps.calls) != 0 || len(recs.recorded) != 0 {
				t.Errorf("live reads %v, records %d; want none", deps.calls, len(recs.recorded))
			}
		})
	}
}

// Objects of a resource with a dependent type that is not labelled cannot
// be cleared.
func TestClearanceFingerprintNeedsLabels(t *testing.T) {
	rules := staticRules{vpcs.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name")}}
	v := NewValidator(rules, loaded(true), &fakeDependents{}, WithHorizon(&fakeCurrency{}, &fakeActivation{}, nil))
	if fp, ok := v.ClearanceFingerprint(index.Source{Export: kcp.ObjectKey{Cluster: provider}, Resource: vpcs}); ok {
		t.Errorf("ClearanceFingerprint = %q, true; want none", fp)
	}
}

// Preparing the clearance of an object that is not due yet asks since when
// the guard of its ledger is in effect on its shard, which starts the
// probe that tells, and reads nothing live; a resource that no rule
// protects asks nothing.
func TestWarmClearance(t *testing.T) {
	e := entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name")
	e.Target = index.Source{Export: kcp.ObjectKey{Cluster: provider, Name: vpcs.Group}, Resource: vpcs}
	rules := schemedRules{staticRules{vpcs.GroupResource(): {e}}}
	deps := &fakeDependents{}
	act := &fakeActivation{}
	v := NewValidator(rules, loaded(true), deps, WithHorizon(&fakeCurrency{}, act, nil))
	obj := kcp.Meta{Cluster: consumer, Namespace: "default", Name: "vpc-a"}

	if !v.WarmClearance(context.Background(), provider, vms, obj) || len(act.keys) != 0 {
		t.Errorf("asked %v for a resource no rule protects, or said something is left to prepare", act.keys)
	}
	if v.WarmClearance(context.Background(), provider, vpcs, obj) {
		t.Error("prepared while the guard's activation is not known")
	}
	want := tracking.Key{Kind: tracking.KindGuard, Source: e.Target, Shard: "https://shard-1/vw/vpcs"}
	if len(act.keys) != 1 || act.keys[0] != want {
		t.Errorf("asked %v, want the guard %v", act.keys, want)
	}
	act.since = time.Now()
	if !v.WarmClearance(context.Background(), provider, vpcs, obj) {
		t.Error("not prepared once the guard's activation is known")
	}
	if len(deps.calls) != 0 {
		t.Errorf("live reads %v; want none", deps.calls)
	}
}
