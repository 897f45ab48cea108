package inflight

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// leasePoll is how often Resolve reads an object whose leases have not
// all ended as their ends have passed, and leaseSettle how long after its
// end it waits for a lease's replica to replace it with its marks.
const (
	leasePoll   = 50 * time.Millisecond
	leaseSettle = 2 * time.Second
)

// Resolve waits until the leases that a DELETE of t found on it have ended,
// ending the writer's own at once (see Settle), and returns the object as
// it then is, its leases replaced by the references admitted under them,
// or nil if it is gone. A lease of another replica ends as its Until
// passes; its replica writes the marks in its place moments later. It
// reads the object once every lease found has passed, and again until no
// lease is left, for at most leaseSettle after the end of the latest, or
// until ctx ends; then it returns the last state read, whose leases count
// as floors (see Ledger.Assess).
func (w *Writer) Resolve(ctx context.Context, t Target, leases []Lease) ([]byte, error) {
	if err := w.Settle(ctx, t); err != nil {
		return nil, err
	}
	var until time.Time
	for _, l := range leases {
		if l.Replica != w.opts.Replica {
			until = Later(until, l.Until)
		}
	}
	var last []byte
	for {
		if wait := until.Sub(w.now()); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return last, nil
			case <-timer.C:
			}
		}
		raw, err := w.objects.Get(ctx, t.Source, t.Cluster, t.Namespace, t.Name)
		switch {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil && last != nil && ctx.Err() != nil:
			return last, nil
		case err != nil:
			return nil, fmt.Errorf("failed to read %s %q: %w", t.Source.Resource.Resource, t.Name, err)
		}
		last = raw
		ledger, err := LedgerOf(raw)
		if err != nil || len(ledger.Leases) == 0 {
			return raw, nil
		}
		if w.now().After(ledger.EffectiveFloor().Add(leaseSettle)) {
			return raw, nil
		}
		until = w.now().Add(leasePoll)
		if _, own := ledger.Lease(w.opts.Replica); own {
			if err := w.Settle(ctx, t); err != nil {
				return raw, nil
			}
		}
	}
}
