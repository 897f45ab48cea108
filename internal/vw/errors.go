package vw

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Causes of failed reads that are worth retrying: the values of the cause
// label of the retry metric.
const (
	CauseTooManyRequests = "too-many-requests"
	CauseUnavailable     = "unavailable"
	CauseTimeout         = "timeout"
	CauseLeaderChanged   = "etcd-leader-changed"
	CauseRetryAfter      = "retry-after"
	CauseGateway         = "gateway"
	CauseConnection      = "connection"
)

// RetryCause reports whether a failed read is worth retrying, and why: kcp
// answers 429 and 503 ("storage is (re)initializing") while a watch cache
// warms up, after a restart or the first use of a newly bound type, and a
// connection can be reset or an etcd leader change can fail a request; all
// of these clear within milliseconds to seconds, as does a proxy's 502 or
// 504 while a shard is unreachable, or a response cut off mid-stream. Errors
// that a retry does not change (403, 404, malformed data, a canceled
// request) are not worth it.
func RetryCause(err error) (string, bool) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return "", false
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

// NamesObject reports whether err is a 404 that names the object name: the
// object does not exist. A 404 that names no object (kcp's virtual
// workspace answers one for a resource it does not serve, as for a moment
// after an APIExport was created or bound, while it builds its API
// definitions) says nothing about the object.
func NamesObject(err error, name string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	details := status.Status().Details
	return details != nil && details.Name == name
}
