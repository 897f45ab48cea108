package vw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

func status(code int, reason, message string, retryAfter string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"message":%q,"code":%d}`, reason, message, code)
	}
}

// RetryCause classifies the errors of real reads: each case is a server
// that fails a LIST the way kcp, a proxy or the network does.
func TestRetryCause(t *testing.T) {
	hijack := func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close() // the connection drops before a response
		}
	}
	tests := []struct {
		name      string
		fail      http.HandlerFunc
		wantCause string // "" if not worth retrying
		wantErr   func(error) bool
	}{
		{name: "storage is (re)initializing", fail: status(503, "ServiceUnavailable", "storage is (re)initializing", "1"), wantCause: CauseUnavailable},
		{name: "too many requests", fail: status(429, "TooManyRequests", "storage is (re)initializing", "1"), wantCause: CauseTooManyRequests},
		{name: "a server timeout", fail: status(500, "Timeout", "request did not complete within 60s", ""), wantCause: CauseTimeout},
		{name: "a gateway timeout with a Status", fail: status(504, "Timeout", "timed out", ""), wantCause: CauseTimeout},
		{name: "etcd leader changed", fail: status(500, "InternalError", "etcdserver: leader changed", ""), wantCause: CauseLeaderChanged},
		{name: "a proxy's 502", fail: func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, "bad gateway")
		}, wantCause: CauseGateway},
		{name: "a proxy's 502 with a Status", fail: status(502, "", "bad gateway", ""), wantCause: CauseGateway},
		{name: "a proxy's 504", fail: func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusGatewayTimeout)
			fmt.Fprint(w, "gateway timeout")
		}, wantCause: CauseTimeout},
		{name: "a 500 that asks to retry later", fail: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","message":"try later","code":500,"details":{"retryAfterSeconds":1}}`)
		}, wantCause: CauseRetryAfter},
		{name: "a response cut off mid-stream", fail: func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{"items":[{"metadata"`) }, wantCause: CauseConnection},
		{name: "connection dropped", fail: hijack, wantCause: CauseConnection},
		{name: "forbidden", fail: status(403, "Forbidden", "access denied", ""), wantErr: apierrors.IsForbidden},
		{name: "not found", fail: func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, wantErr: apierrors.IsNotFound},
		{name: "an internal error without a known cause", fail: status(500, "InternalError", "boom", ""), wantErr: apierrors.IsInternalError},
		{name: "malformed data", fail: func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{"items":[{"metadata":}]}`) }},
		{name: "not a list", fail: func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{"items":{}}`) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.fail)
			defer srv.Close()
			r, err := NewClient(&rest.Config{}, srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.List(context.Background(), ResourcePath(lc("c1"), vms, "default"), nil, func([]byte) error { return nil })
			if err == nil {
				t.Fatal("the read did not fail")
			}
			if tt.wantErr != nil && !tt.wantErr(err) {
				t.Errorf("error = %v", err)
			}
			cause, retry := RetryCause(err)
			if retry != (tt.wantCause != "") || cause != tt.wantCause {
				t.Errorf("RetryCause(%v) = %q, %v; want %q", err, cause, retry, tt.wantCause)
			}
		})
	}
}

// A list cut off where an item, or the end of the list, could start is as
// much a broken response as one cut off inside an item: the body began with
// "{", so the end of it before the closing "}" is unexpected.
func TestRetryCauseOfAListCutOffBetweenItems(t *testing.T) {
	for _, body := range []string{`{`, `{"items":[`, `{"items":[{"metadata":{}},`, `{"items":[{"metadata":{}}]`, `{"metadata":{"resourceVersion":"1"},`} {
		t.Run(body, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
			defer srv.Close()
			r, err := NewClient(&rest.Config{}, srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.List(context.Background(), ResourcePath(lc("c1"), vms, "default"), nil, func([]byte) error { return nil })
			if cause, retry := RetryCause(err); !retry || cause != CauseConnection {
				t.Errorf("RetryCause(%v) = %q, %v; want %q", err, cause, retry, CauseConnection)
			}
		})
	}
}

// A server that is not there is worth retrying; a request that was
// canceled, or ran out of time, is not.
func TestRetryCauseOfTheCaller(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	r, err := NewClient(&rest.Config{}, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	list := func(ctx context.Context) error {
		_, err := r.List(ctx, ResourcePath(lc("c1"), vms, ""), nil, func([]byte) error { return nil })
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := list(ctx); err == nil {
		t.Error("a read past its deadline did not fail")
	} else if cause, retry := RetryCause(err); retry {
		t.Errorf("RetryCause(%v) = %q: a read that ran out of time is retried", err, cause)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := list(canceled); err == nil {
		t.Error("a canceled read did not fail")
	} else if cause, retry := RetryCause(err); retry {
		t.Errorf("RetryCause(%v) = %q: a canceled read is retried", err, cause)
	}
	srv.Close()
	if err := list(context.Background()); err == nil {
		t.Error("a read of a closed server did not fail")
	} else if cause, retry := RetryCause(err); !retry || cause != CauseConnection {
		t.Errorf("RetryCause(%v) = %q, %v; want %q", err, cause, retry, CauseConnection)
	}
}

func TestRetryCauseOfErrors(t *testing.T) {
	gr := schema.GroupResource{Group: "compute.io", Resource: "virtualmachines"}
	tests := []struct {
		name string
		err  error
		want string // "" if not worth retrying
	}{
		{"no error", nil, ""},
		{"anything else", errors.New("anything else"), ""},
		{"not found", apierrors.NewNotFound(gr, "x"), ""},
		{"forbidden", apierrors.NewForbidden(gr, "x", errors.New("no")), ""},
		{"canceled", fmt.Errorf("reading: %w", context.Canceled), ""},
		{"deadline", fmt.Errorf("reading: %w", context.DeadlineExceeded), ""},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), CauseTooManyRequests},
		{"unavailable", apierrors.NewServiceUnavailable("storage is (re)initializing"), CauseUnavailable},
		{"server timeout", apierrors.NewServerTimeout(gr, "list", 1), CauseRetryAfter},
		{"timeout", apierrors.NewTimeoutError("timed out", 0), CauseTimeout},
		{"leader changed", apierrors.NewInternalError(errors.New("etcdserver: leader changed")), CauseLeaderChanged},
		{"an internal error", apierrors.NewInternalError(errors.New("boom")), ""},
		{"a wrapped 503", fmt.Errorf("reading: %w", apierrors.NewServiceUnavailable("x")), CauseUnavailable},
		{"a broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), CauseConnection},
		{"a connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), CauseConnection},
		{"a connection refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), CauseConnection},
		{"an unexpected EOF", fmt.Errorf("failed to decode list: %w", io.ErrUnexpectedEOF), CauseConnection},
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

// Only a 404 that names the object says that it does not exist.
func TestNamesObject(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "the object not found", err: apierrors.NewNotFound(schema.GroupResource{Group: "network.test.io", Resource: "vpcs"}, "vpc-a"), want: true},
		{name: "another object not found", err: apierrors.NewNotFound(schema.GroupResource{Group: "network.test.io", Resource: "vpcs"}, "vpc-b")},
		{name: "a resource not served (a 404 without a Status)", err: apierrors.NewGenericServerResponse(http.StatusNotFound, "GET", schema.GroupResource{}, "", "404 page not found", 0, true)},
		{name: "forbidden", err: apierrors.NewForbidden(schema.GroupResource{Resource: "vpcs"}, "vpc-a", errors.New("no"))},
		{name: "no error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NamesObject(tt.err, "vpc-a"); got != tt.want {
				t.Errorf("NamesObject(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
