package deletion

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
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
}

// WithEvents records an Event where kcp's teardown waits for an object
// outside it (see decideTeardown and teardown.Waits), once per object and
// message every 10 minutes, through the protected provider's APIExport,
// which must claim events as for the namespace probe; without that, only
// the denial says it.
func WithEvents(e Events) Option {
	return func(v *Validator) { v.events = e }
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
