package replay

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/records"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

// Index is what the Replayer needs of the index; *index.Index implements
// it.
type Index interface {
	// State returns what is known about a source.
	State(src index.Source) index.State
	// Lookup reads an object live.
	Lookup(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string) ([]kcp.Meta, error)
	// Updates receives a value when indexed dependents may have changed.
	Updates() <-chan struct{}
}

// Objects lists, deletes and records Events on protected objects through
// their provider's virtual workspace; *objects.Client implements it.
type Objects interface {
	// List lists the objects of src matching a label selector everywhere.
	List(ctx context.Context, src index.Source, selector string, visit func(kcp.Meta) error) error
	// Delete deletes an object through kcp's admission.
	Delete(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, opts metav1.DeleteOptions) error
	// Event records a core Event about an object in its workspace through
	// the virtual workspace of its provider (see objects.Client.Event).
	Event(ctx context.Context, src index.Source, kind string, obj kcp.Meta, eventType, reason, msg string) error
}

// Targets lists the protected resources; *registry.Registry implements it.
type Targets interface {
	Protections() []registry.Protection
}

// References tells whether the index holds a dependent that references an
// object; *deletion.Validator implements it.
type References interface {
	Referenced(target index.Source, obj kcp.Meta) bool
}

// Results of a replay attempt: the values of the result label of
// dependency_webhook_deletions_replayed_total.
const (
	// ResultDeleted: the replayed DELETE was admitted (or the object was
	// already gone).
	ResultDeleted = "deleted"
	// ResultRefused: the DELETE was refused, in the main because a
	// dependent still references the object; it is tried again later.
	ResultRefused = "refused"
	// ResultCancelled: the object no longer carries the label.
	ResultCancelled = "cancelled"
	// ResultError: the object could not be read or deleted; tried again.
	ResultError = "error"
)

// Options configure a Replayer.
type Options struct {
	// Interval is how often all recorded deletions are listed again
	// without a change of the index. Default 30s.
	Interval time.Duration
	// Workers is how many deletions are tried at once. Default 32: the
	// webhook confirms concurrent DELETEs of one namespace with shared
	// reads, so a wave of replays costs a few reads, not one each.
	Workers int
	// Timeout bounds one attempt (read and delete). Default 30s.
	Timeout time.Duration
	// Metrics, if set, count the result of every attempt, and the reason
	// of every record removed without replaying it.
	Metrics *Metrics
}

// RemovedUncovered is why a record is removed whose resource no rule with
// the Replay deletion policy protects any more.
const RemovedUncovered = "uncovered"

// minPass is the least time between two passes over the recorded
// deletions, and minRelist between two listings, however often the index
// changes.
const (
	minPass   = 100 * time.Millisecond
	minRelist = 2 * time.Second
)

// key identifies an object whose deletion is deferred.
type key struct {
	src       index.Source
	cluster   logicalcluster.Name
	namespace string
	name      string
}

// deferred is what the listing found of a recorded deletion.
type deferred struct {
	meta   kcp.Meta
	policy *metav1.DeletionPropagation
}

// Replayer deletes the objects whose deletion was deferred, each once the
// index holds no dependent that references it. It runs on the elected
// leader only: it is a manager.LeaderElectionRunnable.
type Replayer struct {
	targets    Targets
	index      Index
	objects    Objects
	records    *Records
	references References
	opts       Options

	lock    sync.Mutex
	pending map[key]deferred
	// deleted are the UIDs of the objects that replays deleted (or found
	// gone) since the last listing began (see list).
	deleted map[key]types.UID
}

// New returns a Replayer of the deferred deletions of targets, which waits
// for ix to hold no dependent that references (see references) an object,
// lists and deletes objects with objs, and verifies and removes records
// with records.
func New(targets Targets, ix Index, objs Objects, records *Records, references References, opts Options) *Replayer {
	if opts.Interval <= 0 {
		opts.Interval = 30 * time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 32
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	return &Replayer{targets: targets, index: ix, objects: objs, records: records, references: references, opts: opts,
		pending: map[key]deferred{}, deleted: map[key]types.UID{}}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (r *Replayer) NeedLeaderElection() bool {
	return true
}

// Start implements manager.Runnable: it replays until ctx is done.
func (r *Replayer) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("replay")
	ctx = log.IntoContext(ctx, logger)
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[key](200*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: "replay"})
	var wg sync.WaitGroup
	for range r.opts.Workers {
		wg.Go(func() {
			for r.next(ctx, queue) {
			}
		})
	}
	logger.Info("Replaying deferred deletions")

	ticker := time.NewTicker(r.opts.Interval)
	defer ticker.Stop()
	var listed time.Time
	relist := true
	for {
		// A listing that is due but came too soon after the last one is
		// made as soon as minRelist has passed, not at the next tick.
		var due <-chan time.Time
		if relist {
			if wait := minRelist - time.Since(listed); wait > 0 {
				due = time.After(wait)
			} else {
				r.list(ctx)
				listed, relist = time.Now(), false
			}
		}
		r.enqueue(queue)
		select {
		case <-ctx.Done():
			queue.ShutDown()
			wg.Wait()
			return nil
		case <-ticker.C:
			relist = true
		case <-due:
		case <-r.index.Updates():
			// Dependents changed: some recorded deletions may be free to
			// go, and new ones may have been recorded meanwhile.
			relist = true
			time.Sleep(minPass)
		}
	}
}

// list reads every recorded deletion of the protected resources. Records
// that verify, of resources that a rule with the Replay deletion policy
// protects, are kept to be replayed; every other one is removed, with an
// Event on its object. A resource that cannot be listed keeps what was
// known of it. An object that a replay deleted while the listing was under
// way is not kept again: kcp may have served the listing before the
// deletion, and replaying it again would only find it gone.
func (r *Replayer) list(ctx context.Context) {
	logger := log.FromContext(ctx)
	r.lock.Lock()
	clear(r.deleted)
	r.lock.Unlock()
	selector := depv1alpha1.LabelDeletionRequested
	found := map[key]deferred{}
	listed := map[index.Source]bool{}
	type removal struct {
		src    index.Source
		obj    kcp.Meta
		reason string
		err    error
	}
	var removals []removal
	for _, p := range r.targets.Protections() {
		err := r.objects.List(ctx, p.Source, selector, func(m kcp.Meta) error {
			if m.Terminating || !m.DeletionRequested {
				return nil
			}
			request, err := r.records.verify(p.Target.Resource, m)
			switch {
			case records.ProblemOf(err) == records.ProblemUnknownKey && request.KeyID > r.records.Keys.Keyring().SigningKeyID():
				// Signed with a key that sorts after this replica's
				// signing key: a new key that another replica read first
				// during a rotation. It is looked at again once this one
				// has read it.
				logger.V(1).Info("A record is signed with a newer key than this replica holds; leaving it for now", "key", request.KeyID)
			case err != nil:
				removals = append(removals, removal{src: p.Source, obj: m, reason: string(records.ProblemOf(err)), err: err})
			case !p.Replay:
				removals = append(removals, removal{src: p.Source, obj: m, reason: RemovedUncovered})
			default:
				found[key{src: p.Source, cluster: m.Cluster, namespace: m.Namespace, name: m.Name}] = deferred{meta: m, policy: request.PropagationPolicy}
			}
			return nil
		})
		if err != nil {
			logger.Error(err, "Failed to list deferred deletions", "resource", p.Source)
			continue
		}
		listed[p.Source] = true
	}
	for _, rm := range removals {
		r.remove(ctx, rm.src, rm.obj, rm.reason, rm.err)
	}
	r.lock.Lock()
	defer r.lock.Unlock()
	for k := range r.pending {
		if listed[k.src] {
			delete(r.pending, k)
		}
	}
	for k, d := range found {
		if uid, ok := r.deleted[k]; ok && uid == d.meta.UID {
			continue
		}
		r.pending[k] = d
	}
}

// Reasons of the Events on objects whose record the Replayer removed.
const (
	EventReasonDropped = "DeferredDeletionDropped"
)

// remove removes the record of obj, an object of src, without replaying it
// (the object was read as it is: a change since makes the removal fail,
// and the next listing looks again), and tells why with an Event on the
// object.
func (r *Replayer) remove(ctx context.Context, src index.Source, obj kcp.Meta, reason string, problem error) {
	logger := log.FromContext(ctx).WithValues("resource", src, "cluster", obj.Cluster, "namespace", obj.Namespace, "name", obj.Name, "reason", reason)
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	if err := r.records.Remove(ctx, src, obj); err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			logger.Error(err, "Failed to remove a record of a deferred deletion")
		}
		return
	}
	r.opts.Metrics.removed(reason)
	var why string
	switch {
	case reason == RemovedUncovered:
		why = fmt.Sprintf("no DependencyRule with deletionPolicy Replay protects %s any more", src.Resource.GroupResource())
	case records.ProblemOf(problem) == records.ProblemExpired:
		why = fmt.Sprintf("it expired (%v)", problem)
	default:
		why = fmt.Sprintf("the record was not written by the dependency webhook for this object (%v)", problem)
	}
	msg := fmt.Sprintf("The deferred deletion recorded on this object was dropped without deleting it: %s. Delete the object again if it should go.", why)
	logger.Info("Removed a record of a deferred deletion without replaying it", "why", why)
	if err := r.event(ctx, src, obj, msg); err != nil {
		logger.V(1).Info("Could not record an Event on the object (does its provider's APIExport claim events?)", "error", err.Error())
	}
}

// event records a Warning Event with msg on obj, an object of src, in its
// workspace.
func (r *Replayer) event(ctx context.Context, src index.Source, obj kcp.Meta, msg string) error {
	return r.objects.Event(ctx, src, r.index.State(src).Kind, obj, corev1.EventTypeWarning, EventReasonDropped, msg)
}

// enqueue queues every recorded deletion that the index holds no
// dependents of.
func (r *Replayer) enqueue(queue workqueue.TypedRateLimitingInterface[key]) {
	r.lock.Lock()
	defer r.lock.Unlock()
	for k, d := range r.pending {
		if !r.references.Referenced(k.src, d.meta) {
			queue.Add(k)
		}
	}
}

// next processes one queued deletion; it returns false once the queue
// is shut down.
func (r *Replayer) next(ctx context.Context, queue workqueue.TypedRateLimitingInterface[key]) bool {
	k, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(k)
	result, err := r.replay(ctx, k)
	if result != "" {
		r.opts.Metrics.replayed(result)
	}
	switch result {
	case ResultRefused, ResultError:
		if err != nil && result == ResultError {
			log.FromContext(ctx).Error(err, "Failed to replay a deferred deletion", "resource", k.src, "cluster", k.cluster, "namespace", k.namespace, "name", k.name)
		}
		queue.AddRateLimited(k)
	default:
		queue.Forget(k)
	}
	return true
}

// replay tries to delete one object whose deletion is deferred, with the
// UID and resourceVersion in which the listing saw it recorded as
// preconditions, so that a label removed meanwhile cancels the deletion.
// Only when that version is out of date (a conflict) does it read the
// object, and delete it if it still carries the label.
func (r *Replayer) replay(ctx context.Context, k key) (string, error) {
	r.lock.Lock()
	d, ok := r.pending[k]
	r.lock.Unlock()
	if !ok || r.references.Referenced(k.src, d.meta) {
		// Gone from the listing, or still referenced: the next change of
		// the index queues it again.
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	logger := log.FromContext(ctx).WithValues("resource", k.src, "cluster", k.cluster, "namespace", k.namespace, "name", k.name)

	// listed: obj is the state the listing saw, not yet read.
	obj := d.meta
	listed := obj.UID != "" && obj.ResourceVersion != ""
	for {
		if !listed {
			found, err := r.lookup(ctx, k)
			if err != nil {
				return ResultError, fmt.Errorf("failed to read the object: %w", err)
			}
			switch {
			case found == nil || found.Terminating:
				r.gone(k, obj.UID)
				return ResultDeleted, nil
			case !found.DeletionRequested || r.records.Verify(k.src.Resource.GroupResource(), *found) != nil:
				// Cancelled, or the record changed into one that does not
				// verify (the next listing removes it).
				r.drop(k)
				logger.Info("Deferred deletion cancelled")
				return ResultCancelled, nil
			}
			obj = *found
			r.remember(k, obj)
		}
		opts := metav1.DeleteOptions{
			Preconditions:     &metav1.Preconditions{UID: &obj.UID, ResourceVersion: &obj.ResourceVersion},
			PropagationPolicy: d.policy,
		}
		err := r.objects.Delete(ctx, k.src, k.cluster, k.namespace, k.name, opts)
		switch {
		case err == nil, apierrors.IsNotFound(err):
			r.gone(k, obj.UID)
			logger.V(1).Info("Replayed a deferred deletion")
			return ResultDeleted, nil
		case apierrors.IsConflict(err) && listed:
			// Changed since it was listed (perhaps the label was
			// removed): read it, and try again with what it is now.
			listed = false
			continue
		case apierrors.IsConflict(err):
			// Changed since it was read: read it again later.
			return ResultRefused, nil
		case apierrors.IsForbidden(err):
			logger.V(1).Info("Replayed deletion refused; trying again later", "reason", err.Error())
			return ResultRefused, nil
		}
		return ResultError, fmt.Errorf("failed to delete the object: %w", err)
	}
}

// lookup reads the object of a deferred deletion live; nil if it is gone.
func (r *Replayer) lookup(ctx context.Context, k key) (*kcp.Meta, error) {
	found, err := r.index.Lookup(ctx, k.src, k.cluster, k.namespace, k.name)
	if err != nil {
		return nil, err
	}
	for i := range found {
		if found[i].Namespace == k.namespace && found[i].Name == k.name {
			return &found[i], nil
		}
	}
	return nil, nil
}

// remember keeps the state of a deferred deletion that was read, for the
// next attempt, unless a listing dropped it meanwhile.
func (r *Replayer) remember(k key, obj kcp.Meta) {
	r.lock.Lock()
	defer r.lock.Unlock()
	if d, ok := r.pending[k]; ok {
		d.meta = obj
		r.pending[k] = d
	}
}

// drop forgets a deferred deletion.
func (r *Replayer) drop(k key) {
	r.lock.Lock()
	defer r.lock.Unlock()
	delete(r.pending, k)
}

// gone forgets a deferred deletion whose object, of UID uid, a replay
// deleted or found gone, and remembers it for the listing under way.
func (r *Replayer) gone(k key, uid types.UID) {
	r.lock.Lock()
	defer r.lock.Unlock()
	delete(r.pending, k)
	r.deleted[k] = uid
}
