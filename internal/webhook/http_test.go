package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

type handlerFunc func(context.Context, admission.Request) admission.Response

func (f handlerFunc) Handle(ctx context.Context, req admission.Request) admission.Response {
	return f(ctx, req)
}

const validReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","operation":"DELETE",
"kind":{"group":"network.io","version":"v1","kind":"VPC"},"resource":{"group":"network.io","version":"v1","resource":"vpcs"},
"name":"vpc-a","namespace":"default","userInfo":{"username":"alice"},
"oldObject":{"metadata":{"name":"vpc-a","namespace":"default","annotations":{"kcp.io/cluster":"c1"}}}}}`

func post(h http.Handler, contentType, body string) *httptest.ResponseRecorder {
	return postTo(h, "/validate/provider", contentType, body)
}

func postTo(h http.Handler, path, contentType, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestAdmissionHandlerRejectsMalformedReviews(t *testing.T) {
	called := false
	h := NewAdmissionHandler("/validate", handlerFunc(func(context.Context, admission.Request) admission.Response {
		called = true
		return admission.Allowed("")
	}))
	tests := []struct {
		name, contentType, body string
		want                    int
	}{
		{"not JSON", "application/json", "not json", http.StatusBadRequest},
		{"empty body", "application/json", "", http.StatusBadRequest},
		{"truncated", "application/json", validReview[:50], http.StatusBadRequest},
		{"wrong content type", "text/plain", validReview, http.StatusBadRequest},
		{"no content type", "", validReview, http.StatusBadRequest},
		{"wrong kind", "application/json", strings.Replace(validReview, `"AdmissionReview"`, `"Pod"`, 1), http.StatusBadRequest},
		{"wrong apiVersion", "application/json", strings.Replace(validReview, `admission.k8s.io/v1`, `v1`, 1), http.StatusBadRequest},
		{"no request", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
		{"no uid", "application/json", strings.Replace(validReview, `"uid":"u1",`, ``, 1), http.StatusBadRequest},
		{"no operation", "application/json", strings.Replace(validReview, `"operation":"DELETE",`, ``, 1), http.StatusBadRequest},
		{"request is a string", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"x"}`, http.StatusBadRequest},
		{"too large", "application/json", `{"x":"` + strings.Repeat("a", maxReviewSize) + `"}`, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called = false
			rec := post(h, tt.contentType, tt.body)
			if rec.Code != tt.want {
				t.Errorf("status = %d, want %d (%s)", rec.Code, tt.want, rec.Body)
			}
			if called {
				t.Error("the handler was called for a malformed review")
			}
		})
	}

	for _, path := range []string{"/validate", "/validate/", "/validate/provider/extra", "/validate/Not-A-Cluster", "/other/provider"} {
		t.Run("path "+path, func(t *testing.T) {
			called = false
			if rec := postTo(h, path, "application/json", validReview); rec.Code != http.StatusNotFound || called {
				t.Errorf("status = %d (handler called: %v), want 404: %s", rec.Code, called, rec.Body)
			}
		})
	}

	t.Run("GET", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/validate/provider", nil))
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("status = %d", rec.Code)
		}
	})
}

func TestAdmissionHandlerAnswersWellFormedReviews(t *testing.T) {
	h := NewAdmissionHandler("/validate", handlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		if req.Name != "vpc-a" || req.Operation != admissionv1.Delete {
			t.Errorf("unexpected request %+v", req)
		}
		if p, ok := ProviderFrom(ctx); !ok || p != provider {
			t.Errorf("provider workspace = %q, %v; want %q from the URL", p, ok, provider)
		}
		return admission.Denied("still referenced")
	}))
	rec := post(h, "application/json; charset=utf-8", validReview)
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d: %s", rec.Code, rec.Body)
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(rec.Body.Bytes(), review); err != nil {
		t.Fatal(err)
	}
	if review.Response == nil || review.Response.UID != "u1" || review.Response.Allowed || review.Response.Result.Message != "still referenced" {
		t.Errorf("unexpected response %+v", review.Response)
	}
}

func TestAdmissionHandlerRecoversPanics(t *testing.T) {
	h := NewAdmissionHandler("/validate", handlerFunc(func(context.Context, admission.Request) admission.Response {
		panic("boom")
	}))
	rec := post(h, "application/json", validReview)
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(rec.Body.Bytes(), review); err != nil {
		t.Fatalf("status %d, body %s: %v", rec.Code, rec.Body, err)
	}
	if review.Response.Allowed || review.Response.Result.Code != http.StatusInternalServerError {
		t.Errorf("unexpected response %+v", review.Response)
	}
}

// FuzzAdmissionHandler feeds arbitrary bodies through the HTTP handler and
// the real validator: the answer is always 4xx or a well-formed review, and
// nothing panics.
func FuzzAdmissionHandler(f *testing.F) {
	f.Add([]byte(validReview))
	f.Add([]byte(strings.Replace(validReview, `"kcp.io/cluster":"c1"`, `"dependencies.opendefense.cloud/skip-protection":"true"`, 1)))
	f.Add([]byte(strings.Replace(validReview, `"oldObject":{`, `"oldObject":[{`, 1)))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"DELETE","resource":{},"oldObject":null}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))

	deps := &fakeDependents{}
	deps.add("c1", vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
	v := NewDeletionValidator(staticRules{vpcs.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name")}}, loaded(true), deps)
	h := NewAdmissionHandler("/validate", v)

	f.Fuzz(func(t *testing.T, body []byte) {
		deps.calls = nil
		rec := post(h, "application/json", string(body))
		switch {
		case rec.Code >= 400 && rec.Code < 500:
		case rec.Code == http.StatusOK:
			review := &admissionv1.AdmissionReview{}
			if err := json.NewDecoder(bytes.NewReader(rec.Body.Bytes())).Decode(review); err != nil || review.Response == nil {
				t.Fatalf("200 without a review: %s", rec.Body)
			}
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}
