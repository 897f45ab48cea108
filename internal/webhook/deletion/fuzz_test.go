package deletion

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// validReview is a DELETE of a VPC in workspace c1, as kcp sends it.
const validReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","operation":"DELETE",
"kind":{"group":"network.io","version":"v1","kind":"VPC"},"resource":{"group":"network.io","version":"v1","resource":"vpcs"},
"name":"vpc-a","namespace":"default","userInfo":{"username":"alice"},
"oldObject":{"metadata":{"name":"vpc-a","namespace":"default","annotations":{"kcp.io/cluster":"c1"}}}}}`

// post sends body to h, at the webhook of the provider workspace.
func post(h http.Handler, contentType, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/validate/provider", strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// FuzzAdmissionHandler feeds arbitrary bodies through the HTTP handler and
// the real validator: the answer is always a well-formed review, and
// nothing panics.
func FuzzAdmissionHandler(f *testing.F) {
	f.Add([]byte(validReview))
	f.Add([]byte(strings.Replace(validReview, `"kcp.io/cluster":"c1"`, `"dependencies.opendefense.cloud/skip-protection":"true"`, 1)))
	f.Add([]byte(strings.Replace(validReview, `"kcp.io/cluster":"c1"`, `"kcp.io/cluster":"c1","dependencies.opendefense.cloud/skip-protection":"true","dependencies.opendefense.cloud/skip-protection-set-by":"{\"user\":\"a\"}"`, 1)))
	f.Add([]byte(strings.Replace(validReview, `"oldObject":{`, `"oldObject":[{`, 1)))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"DELETE","resource":{},"oldObject":null}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))

	deps := &fakeDependents{}
	deps.add("c1", vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
	v := NewValidator(staticRules{vpcs.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name")}}, loaded(true), deps, WithNamespaces(deps))
	h := webhook.NewAdmissionHandler("/validate", v)

	f.Fuzz(func(t *testing.T, body []byte) {
		deps.calls = nil
		rec := post(h, "application/json", string(body))
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		review := &admissionv1.AdmissionReview{}
		if err := json.NewDecoder(bytes.NewReader(rec.Body.Bytes())).Decode(review); err != nil || review.Response == nil {
			t.Fatalf("200 without a review: %s", rec.Body)
		}
	})
}
