package deletion

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// EventReasonBlocked is the reason of the Event that a refused DELETE
// leaves on the object.
const EventReasonBlocked = "DeletionBlocked"

// Eventer records Events about objects in their workspace;
// *objects.Client implements it.
type Eventer interface {
	Event(ctx context.Context, src index.Source, kind string, obj kcp.Meta, eventType, reason, msg string) error
}

// WithEvents has a refused DELETE (not a dry run, not an item of kcp's
// teardown) leave a Warning Event DeletionBlocked on the object, with the
// denial's message, through e: at most one per object every
// blockedEventInterval, in the background, so that a DELETE waits for no
// write. Where the protected provider's APIExport does not claim events,
// the Event is not recorded (and that is logged at verbosity 1).
func WithEvents(e Eventer) Option {
	return func(v *Validator) { v.events = &blockedEvents{eventer: e, sent: map[eventKey]time.Time{}} }
}

// blockedEventInterval is how long the webhook records no second
// DeletionBlocked Event about the same object.
const blockedEventInterval = 10 * time.Minute

// eventKey identifies an object for deduplication.
type eventKey struct {
	src  index.Source
	uid  string
	name string
}

// blockedEvents records, deduplicated, the Events of refused DELETEs.
type blockedEvents struct {
	eventer Eventer

	lock   sync.Mutex
	sent   map[eventKey]time.Time
	pruned time.Time
}

// blocked records the Event about obj unless one was recorded recently.
func (b *blockedEvents) blocked(ctx context.Context, d denial, kind, msg string, now time.Time) {
	k := eventKey{src: d.source, uid: string(d.obj.UID), name: d.obj.Cluster.String() + "/" + d.obj.Namespace + "/" + d.obj.Name}
	b.lock.Lock()
	if now.Sub(b.pruned) > blockedEventInterval {
		for k, t := range b.sent {
			if now.Sub(t) > blockedEventInterval {
				delete(b.sent, k)
			}
		}
		b.pruned = now
	}
	if t, ok := b.sent[k]; ok && now.Sub(t) < blockedEventInterval {
		b.lock.Unlock()
		return
	}
	b.sent[k] = now
	b.lock.Unlock()
	obj, logger := d.obj.Meta, d.logger
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := b.eventer.Event(ctx, d.source, kind, obj, corev1.EventTypeWarning, EventReasonBlocked, msg); err != nil {
			logger.V(1).Info("Could not record an Event on the object (does its provider's APIExport claim events?)", "error", err.Error())
		}
	}()
}
