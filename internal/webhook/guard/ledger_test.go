package guard

import (
	"context"
	"encoding/json"
	"testing"

	evanjsonpatch "github.com/evanphx/json-patch/v5"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/webhooktest"
)

// vpcLedger is the JSON of vpc-a with annotations (absent if nil, null if
// null is set).
func vpcLedger(t *testing.T, annotations map[string]any, null bool) []byte {
	t.Helper()
	meta := map[string]any{"name": "vpc-a", "namespace": "default"}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	if null {
		meta["annotations"] = nil
	}
	raw, err := json.Marshal(map[string]any{"apiVersion": "network.io/v1", "kind": "VPC", "metadata": meta})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// withLabels returns the object raw with labels.
func withLabels(t *testing.T, raw []byte, labels map[string]any) []byte {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	obj["metadata"].(map[string]any)["labels"] = labels
	out, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLedgerGuard(t *testing.T) {
	const key = depv1alpha1.AnnotationAdmittedReferences
	const stored = "v1 f=0 l=0 0123456789abcdef@1764212000000"
	alice := authenticationv1.UserInfo{Username: "alice"}
	self := authenticationv1.UserInfo{Username: webhookUser}
	answers := tracking.NewAnswers(func() [][]byte { return [][]byte{[]byte("secret")} })
	answer := func(value string) string { return answers.Sign(tracking.KindGuard, value, "") }
	tests := []struct {
		name      string
		op        admissionv1.Operation
		user      authenticationv1.UserInfo
		dryRun    bool
		obj, old  []byte
		want      map[string]any // the annotations after the patch; nil: unpatched
		wantPatch bool
		wantOut   string
		// wantLabels, if set, are the labels after the patch.
		wantLabels map[string]any
		// warnings is how many warnings a patched write gets; 0: one.
		warnings int
	}{
		{name: "a CREATE with the label that says cleared loses it", op: admissionv1.Create, user: alice,
			obj:  withLabels(t, vpcLedger(t, map[string]any{"note": "x"}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef", "app": "a"}),
			want: map[string]any{"note": "x"}, wantPatch: true, wantLabels: map[string]any{"app": "a"}},
		{name: "a CREATE with a ledger and the label that says cleared loses both", op: admissionv1.Create, user: alice,
			obj:  withLabels(t, vpcLedger(t, map[string]any{key: stored}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}),
			want: map[string]any{}, wantPatch: true, wantOut: LedgerKept, wantLabels: map[string]any{}, warnings: 2},
		{name: "an UPDATE that sets the label that says cleared loses it", op: admissionv1.Update, user: alice,
			obj:  withLabels(t, vpcLedger(t, map[string]any{key: stored}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef", "app": "a"}),
			old:  vpcLedger(t, map[string]any{key: stored}, false),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept, wantLabels: map[string]any{"app": "a"}},
		{name: "an UPDATE that copies another fingerprint keeps the stored one", op: admissionv1.Update, user: alice,
			obj:  withLabels(t, vpcLedger(t, map[string]any{key: stored}, false), map[string]any{depv1alpha1.LabelCleared: "fedcba9876543210"}),
			old:  withLabels(t, vpcLedger(t, map[string]any{key: stored}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept, wantLabels: map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}},
		{name: "an UPDATE that removes the label that says cleared keeps it", op: admissionv1.Update, user: alice,
			obj:  withLabels(t, vpcLedger(t, map[string]any{key: stored}, false), map[string]any{"app": "a"}),
			old:  withLabels(t, vpcLedger(t, map[string]any{key: stored}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept, wantLabels: map[string]any{"app": "a", depv1alpha1.LabelCleared: "0123456789abcdef"}},
		{name: "an UPDATE that drops every label keeps the label that says cleared", op: admissionv1.Update, user: alice,
			obj:  vpcLedger(t, map[string]any{key: stored}, false),
			old:  withLabels(t, vpcLedger(t, map[string]any{key: stored}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept, wantLabels: map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}},
		{name: "an UPDATE with null labels keeps the label that says cleared", op: admissionv1.Update, user: alice,
			obj:  withLabels(t, vpcLedger(t, map[string]any{key: stored}, false), nil),
			old:  withLabels(t, vpcLedger(t, map[string]any{key: stored}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept, wantLabels: map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}},
		{name: "an UPDATE that changes both keeps both", op: admissionv1.Update, user: alice,
			obj:  withLabels(t, vpcLedger(t, map[string]any{key: "v1 f=0 l=0"}, false), map[string]any{depv1alpha1.LabelCleared: "fedcba9876543210"}),
			old:  withLabels(t, vpcLedger(t, map[string]any{key: stored}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept, wantLabels: map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}, warnings: 2},
		{name: "an UPDATE that keeps the label that says cleared passes (an exported object re-applied)", op: admissionv1.Update, user: alice,
			obj: withLabels(t, vpcLedger(t, map[string]any{key: stored, "note": "y"}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}),
			old: withLabels(t, vpcLedger(t, map[string]any{key: stored}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"})},
		{name: "the webhook clears: a ledger and the label", op: admissionv1.Update, user: self,
			obj:     withLabels(t, vpcLedger(t, map[string]any{key: stored + " c=0123456789abcdef/u1"}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}),
			old:     vpcLedger(t, map[string]any{key: stored}, false),
			wantOut: LedgerWritten},
		{name: "the webhook labels an object its ledger says is cleared", op: admissionv1.Update, user: self,
			obj:     withLabels(t, vpcLedger(t, map[string]any{key: stored + " c=0123456789abcdef/u1"}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}),
			old:     vpcLedger(t, map[string]any{key: stored + " c=0123456789abcdef/u1"}, false),
			wantOut: LedgerWritten},
		{name: "the webhook records a reference: a new ledger without the label", op: admissionv1.Update, user: self,
			obj:     vpcLedger(t, map[string]any{key: stored + " fedcba9876543210@1764212000001"}, false),
			old:     withLabels(t, vpcLedger(t, map[string]any{key: stored + " c=0123456789abcdef/u1"}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}),
			wantOut: LedgerWritten},
		{name: "the webhook's probe of the label (not a fingerprint) is kept out like anyone's", op: admissionv1.Update, user: self,
			obj:  withLabels(t, vpcLedger(t, map[string]any{key: stored}, false), map[string]any{depv1alpha1.LabelCleared: "probe-x"}),
			old:  vpcLedger(t, map[string]any{key: stored}, false),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept, wantLabels: map[string]any{}},
		{name: "the webhook's user sets the label on an object without a ledger: kept out", op: admissionv1.Update, user: self,
			obj:  withLabels(t, vpcLedger(t, map[string]any{}, false), map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}),
			old:  vpcLedger(t, map[string]any{}, false),
			want: map[string]any{}, wantPatch: true, wantOut: LedgerKept, wantLabels: map[string]any{}},
		{name: "a CREATE with a ledger gets none", op: admissionv1.Create, user: alice,
			obj: vpcLedger(t, map[string]any{key: stored, "note": "x"}, false), want: map[string]any{"note": "x"}, wantPatch: true, wantOut: LedgerKept},
		{name: "an UPDATE that removes the ledger keeps it", op: admissionv1.Update, user: alice,
			obj: vpcLedger(t, map[string]any{"note": "x"}, false), old: vpcLedger(t, map[string]any{key: stored}, false),
			want: map[string]any{"note": "x", key: stored}, wantPatch: true, wantOut: LedgerKept},
		{name: "an UPDATE that drops every annotation keeps the ledger", op: admissionv1.Update, user: alice,
			obj: vpcLedger(t, nil, false), old: vpcLedger(t, map[string]any{key: stored}, false),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept},
		{name: "an UPDATE with null annotations keeps the ledger", op: admissionv1.Update, user: alice,
			obj: vpcLedger(t, nil, true), old: vpcLedger(t, map[string]any{key: stored}, false),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept},
		{name: "an UPDATE from null annotations that sets a ledger drops it", op: admissionv1.Update, user: alice,
			obj: vpcLedger(t, map[string]any{key: stored, "note": "x"}, false), old: vpcLedger(t, nil, true),
			want: map[string]any{"note": "x"}, wantPatch: true, wantOut: LedgerKept},
		{name: "an UPDATE from null to null annotations passes", op: admissionv1.Update, user: alice,
			obj: vpcLedger(t, nil, true), old: vpcLedger(t, nil, true)},
		{name: "an UPDATE that back-dates the ledger keeps the stored one", op: admissionv1.Update, user: alice,
			obj: vpcLedger(t, map[string]any{key: "v1 f=0 l=0"}, false), old: vpcLedger(t, map[string]any{key: stored}, false),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept},
		{name: "an UPDATE that sets a ledger where there was none drops it", op: admissionv1.Update, user: alice,
			obj: vpcLedger(t, map[string]any{key: stored}, false), old: vpcLedger(t, map[string]any{}, false),
			want: map[string]any{}, wantPatch: true, wantOut: LedgerKept},
		{name: "an UPDATE that keeps the ledger passes", op: admissionv1.Update, user: alice,
			obj: vpcLedger(t, map[string]any{key: stored}, false), old: vpcLedger(t, map[string]any{key: stored}, false)},
		{name: "the webhook writes its own ledger", op: admissionv1.Update, user: self,
			obj: vpcLedger(t, map[string]any{key: stored}, false), old: vpcLedger(t, map[string]any{}, false), wantOut: LedgerWritten},
		{name: "the webhook's probe of the guard (not a ledger) is kept out like anyone's", op: admissionv1.Update, user: self,
			obj: vpcLedger(t, map[string]any{key: "probe-x"}, false), old: vpcLedger(t, map[string]any{key: stored}, false),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept},
		{name: "the webhook's dry-run probe of the guard gets the signed answer", op: admissionv1.Update, user: self, dryRun: true,
			obj: vpcLedger(t, map[string]any{key: "probe-x"}, false), old: vpcLedger(t, map[string]any{key: stored}, false),
			want: map[string]any{key: stored, depv1alpha1.AnnotationProbeAnswer: answer("probe-x")}, wantPatch: true, wantOut: webhook.ResultProbe},
		{name: "the webhook's dry-run probe of the label gets the signed answer, on an object without annotations", op: admissionv1.Update, user: self, dryRun: true,
			obj: withLabels(t, vpcLedger(t, nil, false), map[string]any{depv1alpha1.LabelCleared: "probe-y"}), old: vpcLedger(t, nil, false),
			want: map[string]any{depv1alpha1.AnnotationProbeAnswer: answer("probe-y")}, wantPatch: true, wantOut: webhook.ResultProbe, wantLabels: map[string]any{}},
		{name: "another user's dry run of a probe's value gets no answer", op: admissionv1.Update, user: alice, dryRun: true,
			obj: vpcLedger(t, map[string]any{key: "probe-x"}, false), old: vpcLedger(t, map[string]any{key: stored}, false),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept},
		{name: "the webhook's dry run of another value gets no answer", op: admissionv1.Update, user: self, dryRun: true,
			obj: vpcLedger(t, map[string]any{key: "v1 f=0 l=0 garbage"}, false), old: vpcLedger(t, map[string]any{key: stored}, false),
			want: map[string]any{key: stored}, wantPatch: true, wantOut: LedgerKept},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := webhook.NewMetrics()
			g := NewLedgerGuard(StaticSelf(authenticationv1.UserInfo{Username: webhookUser}), answers, m)
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "req-1", Operation: tt.op, UserInfo: tt.user, DryRun: &tt.dryRun,
				Resource: metav1.GroupVersionResource{Group: vpcs.Group, Version: vpcs.Version, Resource: vpcs.Resource},
				Object:   runtime.RawExtension{Raw: tt.obj}, OldObject: runtime.RawExtension{Raw: tt.old},
			}}
			resp, out := g.handle(context.Background(), req)
			if !resp.Allowed || out != tt.wantOut {
				t.Fatalf("response %+v, outcome %q; want allowed, %q", resp.Result, out, tt.wantOut)
			}
			// The metric counts every outcome but none and a probe's.
			g.Handle(context.Background(), req)
			wantSeries := 1
			if tt.wantOut == "" || tt.wantOut == webhook.ResultProbe {
				wantSeries = 0
			}
			if got, n := webhooktest.MetricValue(t, m, "dependency_webhook_record_writes_total", "outcome", tt.wantOut); n != wantSeries || wantSeries == 1 && got != 1 {
				t.Errorf("dependency_webhook_record_writes_total has %d series, {outcome=%q} = %v; want %d series", n, tt.wantOut, got, wantSeries)
			}
			if (len(resp.Patches) > 0) != tt.wantPatch {
				t.Fatalf("patches %v; want a patch: %v", resp.Patches, tt.wantPatch)
			}
			if !tt.wantPatch {
				return
			}
			ops, _ := json.Marshal(resp.Patches)
			patch, err := evanjsonpatch.DecodePatch(ops)
			if err != nil {
				t.Fatal(err)
			}
			patched, err := patch.Apply(tt.obj)
			if err != nil {
				t.Fatalf("applying %s: %v", ops, err)
			}
			var got struct {
				Metadata struct {
					Labels      map[string]any `json:"labels"`
					Annotations map[string]any `json:"annotations"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(patched, &got); err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(tt.want)
			have, _ := json.Marshal(got.Metadata.Annotations)
			if string(want) != string(have) {
				t.Errorf("annotations after the patch %s, want %s", have, want)
			}
			if tt.wantLabels != nil {
				want, _ := json.Marshal(tt.wantLabels)
				have, _ := json.Marshal(got.Metadata.Labels)
				if string(want) != string(have) {
					t.Errorf("labels after the patch %s, want %s", have, want)
				}
			}
			if warnings := max(tt.warnings, 1); len(resp.Warnings) != warnings {
				t.Errorf("warnings %v, want %d", resp.Warnings, warnings)
			}
		})
	}
}
