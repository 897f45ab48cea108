package teardown

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EventReasonWaits is the reason of the Event recorded when kcp's teardown
// waits for an object outside it.
const EventReasonWaits = "TeardownWaits"

// waitTTL is how long an Event about a teardown that waits is not recorded
// again for the same object and message: kcp retries a teardown every few
// seconds, at most every minute.
const waitTTL = 10 * time.Minute

// maxMessage bounds the message of an Event.
const maxMessage = 1024

// Waits records Warning Events about teardowns that wait for objects
// outside them, each once per object and message every 10 minutes. Memory
// is proportional to the Events recorded in that time.
type Waits struct {
	lock     sync.Mutex
	recorded map[string]time.Time
	now      func() time.Time
}

// NewWaits returns a Waits that has recorded nothing.
func NewWaits() *Waits {
	return &Waits{recorded: map[string]time.Time{}, now: time.Now}
}

// Create creates the JSON body of a core Event in namespace of the
// workspace.
type Create func(ctx context.Context, namespace string, body []byte) error

// Record records an Event saying msg about obj, an object in a namespace
// being deleted (terminating) or not, through create, unless it did within
// the last 10 minutes. The Event is about the namespace if it is being
// deleted, in the namespace default, since kcp creates nothing in a
// namespace being deleted, Events included; otherwise about the object, in
// its namespace (or default, for a cluster-scoped object).
func (w *Waits) Record(ctx context.Context, create Create, obj corev1.ObjectReference, terminating bool, msg string) error {
	involved := obj
	if terminating && obj.Namespace != "" {
		involved = corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: obj.Namespace}
	}
	namespace := involved.Namespace
	if namespace == "" {
		// An Event about a cluster-scoped object lives in default.
		namespace = metav1.NamespaceDefault
	}
	if !w.first(fmt.Sprintf("%s|%s|%s|%s", involved.Kind, involved.Namespace, involved.Name, msg)) {
		return nil
	}
	if len(msg) > maxMessage {
		msg = msg[:maxMessage-3] + "..."
	}
	now := metav1.NewTime(w.now())
	body, err := json.Marshal(corev1.Event{
		TypeMeta:       metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta:     metav1.ObjectMeta{GenerateName: involved.Name + ".", Namespace: namespace},
		InvolvedObject: involved,
		Reason:         EventReasonWaits, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "dependency-webhook"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	})
	if err != nil {
		return fmt.Errorf("failed to encode an Event: %w", err)
	}
	return create(ctx, namespace, body)
}

// first reports whether key was not recorded within waitTTL, and
// remembers it; it forgets what has expired.
func (w *Waits) first(key string) bool {
	now := w.now()
	w.lock.Lock()
	defer w.lock.Unlock()
	for k, at := range w.recorded {
		if now.Sub(at) >= waitTTL {
			delete(w.recorded, k)
		}
	}
	if _, ok := w.recorded[key]; ok {
		return false
	}
	w.recorded[key] = now
	return true
}
