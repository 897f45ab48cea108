package route

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kcp-dev/logicalcluster/v3"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/opendefensecloud/dependency-controller/internal/index/sources"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// ErrNotInspected is what a request fails with (wrapped) while the
// APIExport of a source has not been read yet (right after the source was
// added, e.g. when the webhook starts): which shards serve it is not known,
// so nothing can be read or written. It clears within a poll interval, and
// is retried.
var ErrNotInspected = errors.New("the APIExport has not been read yet")

// ErrRefused is what a read fails with (wrapped) when every shard's virtual
// workspace refuses (403) a logical cluster that binds the export, as far
// as the index knows: while a shard starts, its virtual workspace refuses
// workspaces whose bindings it has not synced yet. It is retried; it never
// means "no dependents".
var ErrRefused = errors.New("every shard's virtual workspace refused a workspace that binds the export")

// ErrUnbound is what a read or write of an object fails with (wrapped)
// while every shard's virtual workspace refuses (403) its logical cluster
// and BindingSettle has not passed since the first attempt, or while the
// virtual workspace answers 404 without naming the object (it does not
// serve the resource yet): kcp's virtual workspace learns of an APIBinding
// from an informer, and builds the API definitions of an APIExport after it
// was created, so for a moment after a workspace binds an export, every
// shard refuses it although its objects exist. It is retried; only once
// BindingSettle has passed does a refusal on every shard mean that the
// workspace does not bind the export, and a 404 that names no object never
// means that the object does not exist.
var ErrUnbound = errors.New("the virtual workspace does not serve the workspace's objects yet (a workspace or an export bound a moment ago)")

// BindingSettle is how long the reads and writes that conclude "no such
// object" from a refusal on every shard keep asking first (see ErrUnbound):
// those of the objects that dependents' writes add references to, whose
// references would otherwise go unrecorded.
const BindingSettle = time.Second

// Unserved is the outcome of a read or write that found no shard serving
// cluster for src after waited (since its first attempt): an error wrapping
// ErrUnbound, which is retried, while waited is shorter than settle, and nil
// once it is not: only then does the refusal of every shard mean that the
// cluster does not bind the export, and so holds no object of it.
func Unserved(src sources.Source, cluster logicalcluster.Name, waited, settle time.Duration) error {
	if waited < settle {
		return fmt.Errorf("%s in logical cluster %s: %w", src, cluster, ErrUnbound)
	}
	return nil
}

// Served turns a 404 of a request for the object name that does not name
// it (see vw.NamesObject: the virtual workspace does not serve the resource
// yet) into an error wrapping ErrUnbound, which is retried, so that it is
// never taken for "no such object". Other errors it returns as they are.
func Served(err error, name string) error {
	if apierrors.IsNotFound(err) && !vw.NamesObject(err, name) {
		// Not wrapped: apierrors.IsNotFound follows wrapped errors, and
		// the 404 must not read as NotFound.
		return fmt.Errorf("%w: %v", ErrUnbound, err) //nolint:errorlint // see above
	}
	return err
}

// Causes of retries that are states of the index rather than errors of kcp;
// the others are vw's.
const (
	CauseNotInspected = "not-inspected"
	CauseRefused      = "refused"
	CauseUnbound      = "unbound"
)

// RetryCause reports whether a failed request is worth retrying, and why
// (see vw.RetryCause; requests also wait for the index to have read the
// export, and for a shard that is starting).
func RetryCause(err error) (string, bool) {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "", false
	case errors.Is(err, ErrNotInspected):
		return CauseNotInspected, true
	case errors.Is(err, ErrRefused):
		return CauseRefused, true
	case errors.Is(err, ErrUnbound):
		return CauseUnbound, true
	}
	return vw.RetryCause(err)
}

// Backoff of retried requests: the first wait and its cap; each wait
// doubles, with up to 50% jitter.
const (
	retryFirst = 20 * time.Millisecond
	retryMax   = 500 * time.Millisecond
	// retryAttempts bounds the attempts of a caller without a deadline.
	retryAttempts = 5
)

// Retry calls attempt until it succeeds, fails with an error that is not
// worth retrying (see RetryCause), or the next wait would pass the deadline
// of ctx (without one, after retryAttempts attempts); it returns the last
// error. It waits between attempts as wait.Backoff says, and reports each
// retry, by cause (see New). The index's own reads retry with it, and so
// do the writes that it routes (see OnShardOf).
func (r *Router) Retry(ctx context.Context, attempt func() error) error {
	deadline, hasDeadline := ctx.Deadline()
	backoff := wait.Backoff{Duration: retryFirst, Factor: 2, Jitter: 0.5, Cap: retryMax, Steps: math.MaxInt32}
	for attempts := 1; ; attempts++ {
		err := attempt()
		cause, retryable := RetryCause(err)
		if !retryable {
			return err
		}
		next := backoff.Step()
		if hasDeadline && time.Until(deadline) < next+retryFirst || !hasDeadline && attempts >= retryAttempts {
			return err
		}
		if r.retried != nil {
			r.retried(cause)
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
