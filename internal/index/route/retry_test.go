package route

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// failingServer answers a list of one object after failing the first n
// requests with fail.
func failingServer(t *testing.T, n int, fail func(w http.ResponseWriter)) (*vw.Client, *atomic.Int32) {
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
	r, err := vw.NewClient(&rest.Config{}, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return r, &calls
}

// retries is a router that records the causes of its retries.
type retries struct {
	*Router
	lock   sync.Mutex
	causes []string
}

func retryRouter() *retries {
	r := &retries{}
	r.Router = New(nil, nil, func(cause string) {
		r.lock.Lock()
		defer r.lock.Unlock()
		r.causes = append(r.causes, cause)
	})
	return r
}

// retried returns the causes of the retries the router reported.
func (r *retries) retried() []string {
	r.lock.Lock()
	defer r.lock.Unlock()
	return slices.Clone(r.causes)
}

func listOnce(ctx context.Context, r *vw.Client, visit func([]byte) error) error {
	_, err := r.List(ctx, vw.ResourcePath(logicalcluster.NewPath("c1"), vms, "default"), nil, visit)
	return err
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
		{name: "storage is (re)initializing", failures: 3, fail: status(503, "ServiceUnavailable", "storage is (re)initializing", "1"), wantCalls: 4, wantCause: vw.CauseUnavailable},
		{name: "too many requests", failures: 2, fail: status(429, "TooManyRequests", "storage is (re)initializing", "1"), wantCalls: 3, wantCause: vw.CauseTooManyRequests},
		{name: "etcd leader changed", failures: 1, fail: status(500, "InternalError", "etcdserver: leader changed", ""), wantCalls: 2, wantCause: vw.CauseLeaderChanged},
		{name: "a proxy's 502", failures: 1, fail: status(502, "", "bad gateway", "1"), wantCalls: 2, wantCause: vw.CauseGateway},
		{name: "a 500 that asks to retry later", failures: 1, fail: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","message":"try later","code":500,"details":{"retryAfterSeconds":1}}`)
		}, wantCalls: 2, wantCause: vw.CauseRetryAfter},
		{name: "a response cut off mid-stream", failures: 1, fail: func(w http.ResponseWriter) { fmt.Fprint(w, `{"items":[{"metadata"`) }, wantCalls: 2, wantCause: vw.CauseConnection},
		{name: "connection dropped", failures: 2, fail: hijack, wantCalls: 3, wantCause: vw.CauseConnection},
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
			router := retryRouter()
			items := 0
			err := router.Retry(ctx, func() error {
				items = 0
				return listOnce(ctx, r, func([]byte) error { items++; return nil })
			})
			causes := router.retried()
			if calls.Load() != tt.wantCalls {
				t.Errorf("%d requests, want %d (err %v)", calls.Load(), tt.wantCalls, err)
			}
			if tt.wantErr != nil {
				if err == nil || !tt.wantErr(err) {
					t.Errorf("error = %v", err)
				}
				if len(causes) != 0 {
					t.Errorf("retries reported %v, want none", causes)
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
	router := retryRouter()
	start := time.Now()
	err := router.Retry(ctx, func() error { return listOnce(ctx, r, func([]byte) error { return nil }) })
	causes := router.retried()
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "initializing") {
		t.Errorf("error = %v", err)
	}
	if took := time.Since(start); took > 300*time.Millisecond || calls.Load() < 3 {
		t.Errorf("gave up after %s and %d requests; want several attempts within the deadline", took, calls.Load())
	}
	if int32(len(causes)) != calls.Load()-1 {
		t.Errorf("%d retries reported for %d attempts", len(causes), calls.Load())
	}
	// Without a deadline a few attempts are made.
	calls.Store(0)
	_ = router.Retry(context.Background(), func() error { return listOnce(context.Background(), r, func([]byte) error { return nil }) })
	if calls.Load() != retryAttempts {
		t.Errorf("%d attempts without a deadline, want %d", calls.Load(), retryAttempts)
	}
	// A request that is canceled ends the retries, with its error.
	canceled, cancel := context.WithCancel(context.Background())
	attempts := 0
	err = router.Retry(canceled, func() error {
		attempts++
		cancel()
		return apierrors.NewServiceUnavailable("storage is (re)initializing")
	})
	if !apierrors.IsServiceUnavailable(err) || attempts != 1 {
		t.Errorf("a request canceled during its first attempt: %d attempts, error %v; want one, and its error", attempts, err)
	}
	if _, ok := RetryCause(errors.New("anything else")); ok {
		t.Error("an unknown error is retried")
	}
	if _, ok := RetryCause(apierrors.NewNotFound(schema.GroupResource{Resource: "vms"}, "x")); ok {
		t.Error("NotFound is retried")
	}
}

func TestRetryCause(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string // "" if not worth retrying
	}{
		{"no error", nil, ""},
		{"not inspected", fmt.Errorf("src: %w", ErrNotInspected), CauseNotInspected},
		{"refused", fmt.Errorf("src in c1: %w", ErrRefused), CauseRefused},
		{"any other error", fmt.Errorf("%w: v2", errors.New("version not served")), ""},
		{"unavailable, as vw says", apierrors.NewServiceUnavailable("x"), vw.CauseUnavailable},
		{"canceled while not inspected", errors.Join(context.Canceled, ErrNotInspected), ""},
		{"past the deadline while refused", errors.Join(context.DeadlineExceeded, ErrRefused), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cause, retry := RetryCause(tt.err)
			if retry != (tt.want != "") || cause != tt.want {
				t.Errorf("RetryCause(%v) = %q, %v; want %q", tt.err, cause, retry, tt.want)
			}
		})
	}
}

// A read that fails for a second, as a shard's storage does while it
// initializes, succeeds within a request that may take several.
func TestRetryKeepsTryingUntilTheDeadline(t *testing.T) {
	const failures = 7 // 20+40+80+160+320+500+500 ms of backoff, at most 2.5 s with jitter
	r, calls := failingServer(t, failures, status(503, "ServiceUnavailable", "storage is (re)initializing", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	router := retryRouter()
	start := time.Now()
	err := router.Retry(ctx, func() error { return listOnce(ctx, r, func([]byte) error { return nil }) })
	causes := router.retried()
	if err != nil || calls.Load() != failures+1 {
		t.Errorf("after %s and %d requests: %v; want success on attempt %d", time.Since(start), calls.Load(), err, failures+1)
	}
	if len(causes) != failures {
		t.Errorf("%d retries reported, want %d", len(causes), failures)
	}
}

// Every retry that is reported is made: the last attempt of a caller
// without a deadline is not reported as a retry.
func TestRetryReportsOnlyRetriesItMakes(t *testing.T) {
	r, calls := failingServer(t, 1000, status(503, "ServiceUnavailable", "storage is (re)initializing", ""))
	router := retryRouter()
	_ = router.Retry(context.Background(), func() error {
		return listOnce(context.Background(), r, func([]byte) error { return nil })
	})
	causes := router.retried()
	if int32(len(causes)) != calls.Load()-1 {
		t.Errorf("%d retries reported for %d attempts, want %d", len(causes), calls.Load(), calls.Load()-1)
	}
}

// A request that found no shard serving a workspace is retried as unbound
// until the bindings have had time to settle, and only then concluded.
func TestUnserved(t *testing.T) {
	tests := []struct {
		name        string
		waited      time.Duration
		settle      time.Duration
		wantUnbound bool
	}{
		{name: "at the first attempt, settled", settle: 0},
		{name: "at the first attempt", settle: BindingSettle, wantUnbound: true},
		{name: "just before the settle", waited: BindingSettle - time.Millisecond, settle: BindingSettle, wantUnbound: true},
		{name: "once settled", waited: BindingSettle, settle: BindingSettle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Unserved(testSource, logicalcluster.Name("c1"), tt.waited, tt.settle)
			if got := errors.Is(err, ErrUnbound); got != tt.wantUnbound || (err != nil) != tt.wantUnbound {
				t.Fatalf("Unserved(%v, %v) = %v, want unbound %v", tt.waited, tt.settle, err, tt.wantUnbound)
			}
			if cause, _ := RetryCause(err); tt.wantUnbound && cause != CauseUnbound {
				t.Errorf("RetryCause(%v) = %q, want %q", err, cause, CauseUnbound)
			}
		})
	}
}

// Only a 404 that names the object reads as "no such object"; one that does
// not is retried, and other outcomes pass as they are.
func TestServed(t *testing.T) {
	vpcs := schema.GroupResource{Group: "network.test.io", Resource: "vpcs"}
	forbidden := apierrors.NewForbidden(vpcs, "vpc-a", errors.New("no"))
	tests := []struct {
		name         string
		err          error
		wantNotFound bool
		wantUnbound  bool
	}{
		{name: "no error"},
		{name: "the object not found", err: apierrors.NewNotFound(vpcs, "vpc-a"), wantNotFound: true},
		{name: "another object not found", err: apierrors.NewNotFound(vpcs, "vpc-b"), wantUnbound: true},
		{name: "a resource not served", err: apierrors.NewGenericServerResponse(http.StatusNotFound, "GET", schema.GroupResource{}, "", "404 page not found", 0, true), wantUnbound: true},
		{name: "forbidden", err: forbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Served(tt.err, "vpc-a")
			if got := apierrors.IsNotFound(err); got != tt.wantNotFound {
				t.Errorf("IsNotFound(Served(%v)) = %v, want %v", tt.err, got, tt.wantNotFound)
			}
			if got := errors.Is(err, ErrUnbound); got != tt.wantUnbound {
				t.Errorf("Served(%v) unbound = %v, want %v", tt.err, got, tt.wantUnbound)
			}
			if !tt.wantUnbound && err != tt.err { //nolint:errorlint // the error itself is passed on
				t.Errorf("Served(%v) = %v, want it unchanged", tt.err, err)
			}
		})
	}
}
