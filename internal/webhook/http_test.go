package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kcp-dev/logicalcluster/v3"
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

// provider is the provider workspace whose webhook configuration the tests'
// requests come through.
const provider = logicalcluster.Name("provider")

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

// reviewCode decodes the review a response carries and returns the code of
// its result, 200 for an allowed review without one.
func reviewCode(t *testing.T, rec *httptest.ResponseRecorder) int32 {
	t.Helper()
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(rec.Body.Bytes(), review); err != nil || review.Response == nil {
		t.Fatalf("status %d without a review (%v): %s", rec.Code, err, rec.Body)
	}
	if review.Response.Result == nil {
		return http.StatusOK
	}
	if review.Response.Allowed {
		t.Errorf("a malformed review was allowed: %+v", review.Response)
	}
	return review.Response.Result.Code
}

func TestAdmissionHandlerRejectsMalformedReviews(t *testing.T) {
	called := false
	h := NewAdmissionHandler("/validate", handlerFunc(func(context.Context, admission.Request) admission.Response {
		called = true
		return admission.Allowed("")
	}))
	// controller-runtime answers a body it cannot take with an errored
	// review; the request never reaches the handler.
	tests := []struct {
		name, contentType, body string
		want                    int32
	}{
		{"not JSON", "application/json", "not json", http.StatusBadRequest},
		{"empty body", "application/json", "", http.StatusBadRequest},
		{"truncated", "application/json", validReview[:50], http.StatusBadRequest},
		{"wrong content type", "text/plain", validReview, http.StatusBadRequest},
		{"no content type", "", validReview, http.StatusBadRequest},
		{"charset in the content type", "application/json; charset=utf-8", validReview, http.StatusBadRequest},
		{"no request", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
		{"no uid", "application/json", strings.Replace(validReview, `"uid":"u1",`, ``, 1), http.StatusBadRequest},
		{"no operation", "application/json", strings.Replace(validReview, `"operation":"DELETE",`, ``, 1), http.StatusBadRequest},
		{"no resource", "application/json", strings.Replace(validReview, `"resource":{"group":"network.io","version":"v1","resource":"vpcs"},`, ``, 1), http.StatusBadRequest},
		{"request is a string", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"x"}`, http.StatusBadRequest},
		{"too large", "application/json", `{"x":"` + strings.Repeat("a", 7<<20) + `"}`, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called = false
			rec := post(h, tt.contentType, tt.body)
			if code := reviewCode(t, rec); code != tt.want {
				t.Errorf("review code = %d, want %d (%s)", code, tt.want, rec.Body)
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

// The time kcp waits, sent as the timeout parameter of the URL, bounds the
// decision, below the limit the webhook is configured with.
func TestDecisionBudget(t *testing.T) {
	tests := []struct {
		name   string
		query  string
		limit  time.Duration
		want   time.Duration // 0: no deadline
		within time.Duration
	}{
		{name: "no timeout, no limit", want: 0},
		{name: "the limit without a timeout", limit: 3 * time.Second, want: 3 * time.Second},
		{name: "four fifths of kcp's timeout", query: "?timeout=5s", limit: 10 * time.Second, want: 4 * time.Second},
		{name: "the limit when it is shorter", query: "?timeout=10s", limit: 2 * time.Second, want: 2 * time.Second},
		{name: "a short timeout keeps at least half", query: "?timeout=300ms", want: 200 * time.Millisecond},
		{name: "a malformed timeout is ignored", query: "?timeout=soon", limit: time.Second, want: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got time.Duration
			h := NewAdmissionHandler("/validate", handlerFunc(func(ctx context.Context, _ admission.Request) admission.Response {
				ctx, cancel := WithBudget(ctx, tt.limit)
				defer cancel()
				if deadline, ok := ctx.Deadline(); ok {
					got = time.Until(deadline)
				}
				return admission.Allowed("")
			}))
			rec := postTo(h, "/validate/provider"+tt.query, "application/json", validReview)
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d: %s", rec.Code, rec.Body)
			}
			if tt.want == 0 && got != 0 || tt.want != 0 && (got > tt.want || got < tt.want-time.Second/2) {
				t.Errorf("budget = %s, want %s", got, tt.want)
			}
		})
	}
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
	rec := post(h, "application/json", validReview)
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

// Each endpoint of a provider workspace reaches the handler, which learns
// it (and a labelling webhook's scheme) from the URL.
func TestAdmissionHandlerEndpoints(t *testing.T) {
	var endpoint, scheme string
	h := NewAdmissionHandler("/validate", handlerFunc(func(ctx context.Context, _ admission.Request) admission.Response {
		endpoint, scheme = EndpointFrom(ctx), SchemeFrom(ctx)
		return admission.Allowed("")
	}))
	tests := []struct{ path, endpoint, scheme string }{
		{"/validate/provider", "", ""},
		{"/validate/provider/records", EndpointRecords, ""},
		{"/validate/provider/admitted", EndpointAdmitted, ""},
		{"/validate/provider/skip-protection", EndpointSkipProtection, ""},
		{"/validate/provider/labels/00aa", EndpointLabels, "00aa"},
	}
	for _, tt := range tests {
		endpoint, scheme = "-", "-"
		if rec := postTo(h, tt.path, "application/json", validReview); rec.Code != http.StatusOK || endpoint != tt.endpoint || scheme != tt.scheme {
			t.Errorf("%s: status %d, endpoint %q, scheme %q; want 200, %q, %q", tt.path, rec.Code, endpoint, scheme, tt.endpoint, tt.scheme)
		}
	}
	if rec := postTo(h, "/validate/provider/skip-protection/x", "application/json", validReview); rec.Code != http.StatusNotFound {
		t.Errorf("a scheme after the skip-protection endpoint: status %d, want 404", rec.Code)
	}
}
