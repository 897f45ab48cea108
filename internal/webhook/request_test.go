package webhook

import (
	"context"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"
)

// The workspace of a write is the old object's on an UPDATE: kcp sets the
// object's kcp.io/cluster only on a CREATE, and a server-side apply that
// drops a manager's annotations drops it with them.
func TestReadWriteSubject(t *testing.T) {
	const (
		withCluster = `{"metadata":{"name":"vm-1","namespace":"default","annotations":{"kcp.io/cluster":"consumer"}}}`
		forged      = `{"metadata":{"name":"vm-1","namespace":"default","annotations":{"kcp.io/cluster":"victim"}}}`
		without     = `{"metadata":{"name":"vm-1","namespace":"default","labels":null}}`
	)
	ctx := WithProvider(context.Background(), "provider")
	tests := []struct {
		name        string
		op          admissionv1.Operation
		obj, old    string
		wantCluster logicalcluster.Name
		wantCode    int32
	}{
		{name: "a CREATE: the object's, which kcp set", op: admissionv1.Create, obj: withCluster, wantCluster: "consumer"},
		{name: "a CREATE without it is not kcp's", op: admissionv1.Create, obj: without, wantCode: http.StatusBadRequest},
		{name: "an UPDATE whose object lost it: the old object's", op: admissionv1.Update, obj: without, old: withCluster, wantCluster: "consumer"},
		{name: "an UPDATE whose object names another workspace: the old object's", op: admissionv1.Update, obj: forged, old: withCluster, wantCluster: "consumer"},
		{name: "an UPDATE whose old object has none is not kcp's", op: admissionv1.Update, obj: withCluster, old: without, wantCode: http.StatusBadRequest},
		{name: "an UPDATE without an old object", op: admissionv1.Update, obj: withCluster, wantCode: http.StatusBadRequest},
		{name: "an UPDATE whose object is not JSON", op: admissionv1.Update, obj: `{`, old: withCluster, wantCode: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: tt.op, Object: runtime.RawExtension{Raw: []byte(tt.obj)}}}
			if tt.old != "" {
				req.OldObject = runtime.RawExtension{Raw: []byte(tt.old)}
			}
			s, resp := ReadWriteSubject(ctx, req)
			if tt.wantCode != 0 {
				if resp == nil || resp.Result.Code != tt.wantCode {
					t.Fatalf("ReadWriteSubject() = %+v, %+v; want code %d", s, resp, tt.wantCode)
				}
				return
			}
			if resp != nil {
				t.Fatalf("ReadWriteSubject() refused: %+v", resp.Result)
			}
			if s.Cluster != tt.wantCluster || s.Provider != "provider" || s.Name != "vm-1" || s.Namespace != "default" {
				t.Errorf("ReadWriteSubject() = %+v, want cluster %s, provider, vm-1 in default", s, tt.wantCluster)
			}
		})
	}
}
