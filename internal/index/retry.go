package index

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Causes of retried reads, the values of the cause label of the retry
// metric.
const (
	CauseTooManyRequests = "too-many-requests"
	CauseUnavailable     = "unavailable"
	CauseTimeout         = "timeout"
	CauseLeaderChanged   = "etcd-leader-changed"
	CauseRetryAfter      = "retry-after"
	CauseGateway         = "gateway"
	CauseConnection      = "connection"
	CauseNotInspected    = "not-inspected"
	CauseRefused         = "refused"
)

// RetryCause reports whether a failed read is worth retrying, and why: kcp
// answers 429 and 503 ("storage is (re)initializing") while a watch cache
// warms up, after a restart or the first use of a newly bound type, and a
// connection can be reset or an etcd leader change can fail a request; all
// of these clear within milliseconds to seconds, as does a proxy's 502 or
// 504 while a shard is unreachable, or a response cut off mid-stream, and
// ErrNotInspected right after a source was added, and ErrRefused while a
// shard's virtual workspace has not synced its bindings. Errors that a retry does
// not change (403, 404, malformed data, a canceled request) are not retried.
func RetryCause(err error) (string, bool) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return "", false
	}
	if errors.Is(err, ErrNotInspected) {
		return CauseNotInspected, true
	}
	if errors.Is(err, ErrRefused) {
		return CauseRefused, true
	}
	if _, ok := apierrors.SuggestsClientDelay(err); ok && !apierrors.IsTooManyRequests(err) && !apierrors.IsServiceUnavailable(err) {
		return CauseRetryAfter, true
	}
	switch {
	case apierrors.IsTooManyRequests(err):
		return CauseTooManyRequests, true
	case apierrors.IsServiceUnavailable(err):
		return CauseUnavailable, true
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err):
		return CauseTimeout, true
	case apierrors.IsInternalError(err) && strings.Contains(err.Error(), "leader changed"):
		return CauseLeaderChanged, true
	case statusCode(err) == http.StatusBadGateway || statusCode(err) == http.StatusGatewayTimeout:
		// The front-proxy or a virtual workspace could not reach a shard.
		return CauseGateway, true
	case utilnet.IsConnectionReset(err), utilnet.IsConnectionRefused(err), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF), utilnet.IsProbableEOF(err):
		return CauseConnection, true
	}
	return "", false
}

func statusCode(err error) int32 {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code
	}
	return 0
}

// Backoff of retried reads: the first wait, its growth, and its cap.
const (
	retryFirst = 20 * time.Millisecond
	retryMax   = 500 * time.Millisecond
)

// Retry calls attempt until it succeeds, fails with an error that is not
// worth retrying (see RetryCause), or the next wait would pass the deadline
// of ctx; it returns the last error. Between attempts it waits, with
// exponential backoff and jitter, and calls onRetry (if set) with the cause.
// Without a deadline it tries at most 5 times.
func Retry(ctx context.Context, attempt func() error, onRetry func(cause string)) error {
	wait := retryFirst
	for tries := 1; ; tries++ {
		err := attempt()
		cause, retryable := RetryCause(err)
		if !retryable {
			return err
		}
		jittered := wait/2 + rand.N(wait/2+1)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < jittered+retryFirst || !ok && tries >= 5 {
			return err
		}
		if onRetry != nil {
			onRetry(cause)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(jittered):
		}
		wait = min(2*wait, retryMax)
	}
}
