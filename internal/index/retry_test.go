package index

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/logicalcluster/v3"
)

// failingServer answers a list of one object after failing the first n
// requests with fail.
func failingServer(t *testing.T, n int, fail func(w http.ResponseWriter)) (*reader, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if int(calls.Add(1)) <= n {
			fail(w)
			return
		}
		fmt.Fprint(w, `{"kind":"VirtualMachineList","metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"vm-1"}}]}`)
	}))
	t.Cleanup(srv.Close)
	r, err := newReader(&rest.Config{}, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return r, &calls
}

func status(code int, reason, message string, retryAfter string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"message":%q,"code":%d}`, reason, message, code)
	}
}

func TestRetry(t *testing.T) {
	hijack := func(w http.ResponseWriter) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close() // the connection drops before a response
		}
	}
	tests := []struct {
		name      string
		failures  int
		fail      func(w http.ResponseWriter)
		wantCalls int32
		wantCause string
		wantErr   func(error) bool
	}{
		{name: "storage is (re)initializing", failures: 3, fail: status(503, "ServiceUnavailable", "storage is (re)initializing", "1"), wantCalls: 4, wantCause: CauseUnavailable},
		{name: "too many requests", failures: 2, fail: status(429, "TooManyRequests", "storage is (re)initializing", "1"), wantCalls: 3, wantCause: CauseTooManyRequests},
		{name: "etcd leader changed", failures: 1, fail: status(500, "InternalError", "etcdserver: leader changed", ""), wantCalls: 2, wantCause: CauseLeaderChanged},
		{name: "a proxy's 502", failures: 1, fail: status(502, "", "bad gateway", "1"), wantCalls: 2, wantCause: CauseGateway},
		{name: "a 500 that asks to retry later", failures: 1, fail: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","message":"try later","code":500,"details":{"retryAfterSeconds":1}}`)
		}, wantCalls: 2, wantCause: CauseRetryAfter},
		{name: "a response cut off mid-stream", failures: 1, fail: func(w http.ResponseWriter) { fmt.Fprint(w, `{"items":[{"metadata"`) }, wantCalls: 2, wantCause: CauseConnection},
		{name: "connection dropped", failures: 2, fail: hijack, wantCalls: 3, wantCause: CauseConnection},
		{name: "forbidden is not retried", failures: 1, fail: status(403, "Forbidden", "access denied", ""), wantCalls: 1, wantErr: apierrors.IsForbidden},
		{name: "not found is not retried", failures: 1, fail: func(w http.ResponseWriter) { http.NotFound(w, nil) }, wantCalls: 1, wantErr: apierrors.IsNotFound},
		{name: "an internal error without a known cause is not retried", failures: 1, fail: status(500, "InternalError", "boom", ""), wantCalls: 1, wantErr: apierrors.IsInternalError},
		{name: "malformed data is not retried", failures: 1, fail: func(w http.ResponseWriter) { fmt.Fprint(w, `{"items":[{"metadata":}]}`) }, wantCalls: 1, wantErr: func(err error) bool { return err != nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, calls := failingServer(t, tt.failures, tt.fail)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			defer cancel()
			var causes []string
			items := 0
			err := Retry(ctx, func() error {
				items = 0
				_, err := r.list(ctx, resourcePath(logicalcluster.NewPath("c1"), vms, "default"), nil, func([]byte) error { items++; return nil })
				return err
			}, func(cause string) { causes = append(causes, cause) })
			if calls.Load() != tt.wantCalls {
				t.Errorf("%d requests, want %d (err %v)", calls.Load(), tt.wantCalls, err)
			}
			if tt.wantErr != nil {
				if err == nil || !tt.wantErr(err) {
					t.Errorf("error = %v", err)
				}
				return
			}
			if err != nil || items != 1 {
				t.Fatalf("error = %v, %d items", err, items)
			}
			if len(causes) != tt.failures || slices.ContainsFunc(causes, func(c string) bool { return c != tt.wantCause }) {
				t.Errorf("retries reported %v, want %d × %s", causes, tt.failures, tt.wantCause)
			}
		})
	}
}

// A read that keeps failing is given up before the request's deadline.
func TestRetryStopsBeforeTheDeadline(t *testing.T) {
	r, calls := failingServer(t, 1000, status(503, "ServiceUnavailable", "storage is (re)initializing", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Retry(ctx, func() error {
		_, err := r.list(ctx, resourcePath(logicalcluster.NewPath("c1"), vms, ""), nil, func([]byte) error { return nil })
		return err
	}, nil)
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "initializing") {
		t.Errorf("error = %v", err)
	}
	if took := time.Since(start); took > 300*time.Millisecond || calls.Load() < 3 {
		t.Errorf("gave up after %s and %d requests; want several attempts within the deadline", took, calls.Load())
	}
	// Without a deadline a few attempts are made.
	calls.Store(0)
	_ = Retry(context.Background(), func() error {
		_, err := r.list(context.Background(), resourcePath(logicalcluster.NewPath("c1"), vms, ""), nil, func([]byte) error { return nil })
		return err
	}, nil)
	if calls.Load() != 5 {
		t.Errorf("%d attempts without a deadline, want 5", calls.Load())
	}
	if _, ok := RetryCause(errors.New("anything else")); ok {
		t.Error("an unknown error is retried")
	}
	if _, ok := RetryCause(apierrors.NewNotFound(schema.GroupResource{Resource: "vms"}, "x")); ok {
		t.Error("NotFound is retried")
	}
}
