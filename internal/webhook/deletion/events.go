package deletion

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/teardown"
)

// EventReasonTeardownWaits is the reason of the Event recorded when kcp's
// teardown waits for an object outside it.
const EventReasonTeardownWaits = teardown.EventReasonWaits

// Events records core Events in a workspace, through the virtual
// workspace of a provider's APIExport that claims events;
// *objects.Client implements it.
type Events interface {
	CreateEvent(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace string, body []byte) error
	// Event records an Event about obj, an object of src of kind.
	Event(ctx context.Context, src index.Source, kind string, obj kcp.Meta, eventType, reason, msg string) error
}

// WithEvents records an Event where kcp's teardown waits for an object
// outside it (see decideTeardown and teardown.Waits), once per object and
// message every 10 minutes, through the protected provider's APIExport,
// which must claim events as for the namespace probe; without that, only
// the denial says it.
//
// A refused DELETE (not a dry run, not an item of kcp's teardown) leaves a
// Warning Event DeletionBlocked on the object, with the denial's message,
// through e: at most one per object every blockedEventInterval, in the
// background, so that a DELETE waits for no write.
func WithEvents(e Events) Option {
	return func(v *Validator) {
		v.events = e
		v.blocked = &blockedEvents{eventer: e, sent: map[eventKey]time.Time{}}
	}
}

// recordWait records a Warning Event saying msg, why kcp's teardown of the
// object of d waits. Failures are logged only.
func (v *Validator) recordWait(ctx context.Context, d *deletion, scope *teardown.Scope, msg string) {
	if v.events == nil {
		return
	}
	obj := corev1.ObjectReference{
		APIVersion: schema.GroupVersion{Group: d.req.Kind.Group, Version: d.req.Kind.Version}.String(), Kind: d.req.Kind.Kind,
		Namespace: d.obj.Namespace, Name: d.obj.Name, UID: d.obj.UID,
	}
	terminating, _ := scope.Terminating(ctx, d.obj.Namespace)
	create := func(ctx context.Context, namespace string, body []byte) error {
		return v.events.CreateEvent(ctx, d.denial.source, d.obj.Cluster, namespace, body)
	}
	if err := v.waits.Record(ctx, create, obj, terminating, msg); err != nil {
		d.logger.V(1).Info("Could not record an Event on why kcp's teardown waits (does the provider's APIExport claim events?)", "error", err.Error())
	}
}

// EventReasonBlocked is the reason of the Event that a refused DELETE
// leaves on the object.
const EventReasonBlocked = "DeletionBlocked"

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
	eventer Events

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
