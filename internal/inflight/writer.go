package inflight

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/buger/jsonparser"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// Objects reads and patches protected objects through their provider's
// virtual workspace; *objects.Client implements it. Both return a NotFound
// error for an object that does not exist.
type Objects interface {
	Get(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string) ([]byte, error)
	Patch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) ([]byte, error)
}

// Target is a protected object, as its provider serves it.
type Target struct {
	Source    index.Source
	Cluster   logicalcluster.Name
	Namespace string
	Name      string
}

// Result is the outcome of recording a reference on a target.
type Result struct {
	// Missing is set if the target does not exist: nothing was recorded,
	// and a reference to it is a reference to a missing object.
	Missing bool
	// Object is the target's metadata right after the write that recorded
	// the reference. If it is being deleted (Terminating), the write came
	// after its DELETE was admitted, and the reference must be refused.
	Object kcp.Meta
}

// Options configure a Writer.
type Options struct {
	// MaxMarks is how many references a ledger names (default
	// DefaultMaxMarks).
	MaxMarks int
	// BatchTimeout bounds one batch's writes, retries included (default
	// 10s); each caller also waits only as long as its context allows.
	BatchTimeout time.Duration
	// OnConflict, if set, is called for every write that lost a race with
	// another write of the object and is tried again.
	OnConflict func()
	// Lease, if positive, is how long a lease lasts that the writer takes
	// on an object it records references on in a stream: the write that
	// records a reference less than LeaseStreak after the last one also
	// stores a lease (see Lease), and until it ends the references to the
	// object are admitted without a write each. As it ends, one write
	// names them in its place (and takes the next lease if the stream
	// goes on). Zero takes none: every reference is a write.
	Lease time.Duration
	// Replica names the writer in its leases (default: random); it must
	// differ between the webhook's replicas, and between runs of one.
	Replica string
}

// LeaseStreak is how soon after recording a reference on an object the
// writer takes a lease on it (see Options.Lease) as it records the next.
const LeaseStreak = 2 * time.Second

// Writer records admitted references on protected objects, one write at a
// time per object: references to one object that arrive while its write is
// in flight are recorded together by the next, so that many dependents of
// one object admitted at once cost a few writes, not one each, and the
// webhook's own writes never race each other. Each write is a merge patch
// of the ledger annotation with the object's resourceVersion as a
// precondition, so that folding marks (see Ledger.Compact) never loses one
// written by another replica; a write that loses a race reads the object
// and is tried again, and no conflict reaches the dependent's client.
//
// A writer with Options.Lease admits the references to an object that it
// records in a stream under a lease (see Lease): one write stores the
// lease, the references admitted until it ends cost no write, and one
// write names them as it ends.
type Writer struct {
	objects Objects
	opts    Options
	now     func() time.Time

	lock   sync.Mutex
	queues map[Target]*queue
	pruned time.Time
}

// queue is the pending references of one target and what the last write
// learned of it.
type queue struct {
	pending []*request
	writing bool
	// known is the target as the last write left it, if any: its
	// resourceVersion and ledger, so that the next write needs no read
	// unless another write came in between.
	known *state
	idle  time.Time
	// marked is when a reference to the target was last admitted.
	marked time.Time
	// lease is the writer's lease on the target, once a write stored it,
	// until a write begins that ends it.
	lease *lease
}

// lease is a lease of the writer on a target, as a write stored it.
type lease struct {
	until time.Time
	// object is the target's metadata as the write that stored the lease
	// left it: what a reference admitted under the lease is told.
	object kcp.Meta
	// marks are the references admitted under the lease, which the write
	// that ends it names.
	marks  []Mark
	landed Landed
	timer  *time.Timer
}

type state struct {
	resourceVersion string
	ledger          Ledger
	// cleared: the object carries the label that says it is cleared
	// (api/v1alpha1.LabelCleared), which the write removes.
	cleared bool
}

type request struct {
	mark Mark
	// withdraw: the request removes the mark named mark.ID instead of
	// adding mark.
	withdraw bool
	// settle: the request ends the writer's lease on the target, if it has
	// one; final: and the write takes no new one (see Settle).
	settle, final bool
	landed        Landed
	done          chan outcome
}

type outcome struct {
	result Result
	err    error
}

// ErrMayBeCleared is wrapped by the error of a Record whose target could
// not be written and may carry a clearance (see Ledger.Clearance): it
// does, or it could not be read. Such a reference must not be admitted
// unrecorded, since kcp may delete the object without asking the webhook.
var ErrMayBeCleared = errors.New("the object may carry a clearance, which only a write of its ledger removes")

// NewWriter returns a Writer that writes through objects.
func NewWriter(objects Objects, opts Options) *Writer {
	if opts.MaxMarks <= 0 {
		opts.MaxMarks = DefaultMaxMarks
	}
	if opts.BatchTimeout <= 0 {
		opts.BatchTimeout = 10 * time.Second
	}
	if opts.Replica == "" {
		opts.Replica = NewReplica()
	}
	return &Writer{objects: objects, opts: opts, now: time.Now, queues: map[Target]*queue{}}
}

// NewReplica returns a random name for a writer's leases.
func NewReplica() string {
	var b [idBytes]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// Replica returns the name of the writer in its leases.
func (w *Writer) Replica() string { return w.opts.Replica }

// Record records on the target that the admission id was admitted now,
// and returns once a write that includes it has been stored (or the target
// was found missing), or at once under the writer's lease on the target
// (see Options.Lease); landed tells which admission ids an index has seen
// on dependents of the target's type, so that the write can fold those
// marks. An error means the reference may or may not have been recorded;
// the admission must then be refused.
func (w *Writer) Record(ctx context.Context, t Target, id string, landed Landed) (Result, error) {
	m := Mark{ID: id, At: ms(w.now())}
	w.lock.Lock()
	if q, ok := w.queues[t]; ok {
		if res, ok := w.leasedLocked(q, m); ok {
			w.lock.Unlock()
			return res, nil
		}
	}
	w.lock.Unlock()
	return w.enqueue(ctx, t, &request{mark: m, landed: landed, done: make(chan outcome, 1)})
}

// leasedLocked admits m under the lease of q, if it has one that has not
// ended. Callers hold the lock.
func (w *Writer) leasedLocked(q *queue, m Mark) (Result, bool) {
	if q.lease == nil || !w.now().Before(q.lease.until) {
		return Result{}, false
	}
	q.lease.marks = append(q.lease.marks, m)
	q.marked = m.At
	return Result{Object: q.lease.object}, true
}

// Withdraw removes from the target the mark that Record wrote for the
// admission id, once the webhook has refused that admission: the reference
// can then never be stored, and a DELETE of the target need not wait for
// it until MaxInFlight has passed. Only the webhook that generated the id
// for the refused admission may withdraw it; nobody else can have written
// a mark under it. landed is as for Record. It returns once the mark is
// gone (or the target is), in a write of its own or with others, or at
// once if the mark is one of the writer's lease, not written yet.
func (w *Writer) Withdraw(ctx context.Context, t Target, id string, landed Landed) error {
	w.lock.Lock()
	if q, ok := w.queues[t]; ok && q.lease != nil {
		if i := slices.IndexFunc(q.lease.marks, func(m Mark) bool { return m.ID == id }); i >= 0 {
			q.lease.marks = slices.Delete(q.lease.marks, i, i+1)
			w.lock.Unlock()
			return nil
		}
	}
	w.lock.Unlock()
	_, err := w.enqueue(ctx, t, &request{mark: Mark{ID: id}, withdraw: true, landed: landed, done: make(chan outcome, 1)})
	return err
}

// Settle ends the writer's lease on the target, if it has one or a write
// is ending it, and returns once the references admitted under it are
// named on the target (or the target is gone). The write takes no new
// lease, though a reference recorded after it may.
func (w *Writer) Settle(ctx context.Context, t Target) error {
	w.lock.Lock()
	q, ok := w.queues[t]
	busy := ok && (q.lease != nil || q.writing)
	w.lock.Unlock()
	if !busy {
		return nil
	}
	_, err := w.enqueue(ctx, t, &request{settle: true, final: true, done: make(chan outcome, 1)})
	return err
}

// endLease is called as the lease l on t ends: a write names the
// references admitted under it, in its place, unless a write ended it
// already.
func (w *Writer) endLease(t Target, l *lease) {
	w.lock.Lock()
	q, ok := w.queues[t]
	if !ok || q.lease != l {
		w.lock.Unlock()
		return
	}
	q.pending = append(q.pending, &request{settle: true, done: make(chan outcome, 1)})
	if !q.writing {
		q.writing = true
		go w.drain(t, q)
	}
	w.lock.Unlock()
}

// enqueue adds r to the pending requests of t, starts writing them if no
// write of t is under way, and waits for r's outcome.
func (w *Writer) enqueue(ctx context.Context, t Target, r *request) (Result, error) {
	w.lock.Lock()
	w.pruneLocked()
	q, ok := w.queues[t]
	if !ok {
		q = &queue{}
		w.queues[t] = q
	}
	q.pending = append(q.pending, r)
	if !q.writing {
		q.writing = true
		go w.drain(t, q)
	}
	w.lock.Unlock()
	select {
	case o := <-r.done:
		return o.result, o.err
	case <-ctx.Done():
		return Result{}, fmt.Errorf("recording the reference on %s %q: %w", t.Source.Resource.Resource, t.Name, ctx.Err())
	}
}

// Prime tells the writer the state of the target as a caller has just read
// it (raw, its JSON), so that the next write of its ledger starts from it
// instead of reading the target first: references to many objects of one
// namespace then cost one LIST and a write each, not a read and a write
// each. A state that is stale by then costs a conflict and a read, never a
// mark: each write has the resourceVersion it starts from as a
// precondition. It is ignored while the writer knows the target from a
// write of its own, or writes it.
func (w *Writer) Prime(t Target, raw []byte) {
	st, err := stateOf(raw, w.now())
	if err != nil {
		return
	}
	w.lock.Lock()
	defer w.lock.Unlock()
	w.pruneLocked()
	q, ok := w.queues[t]
	if !ok {
		q = &queue{idle: w.now()}
		w.queues[t] = q
	}
	if q.known == nil && !q.writing {
		q.known = st
	}
}

// idleTTL is how long the queue of an idle target (and what it knows of
// the target) is kept.
const idleTTL = 10 * time.Second

// pruneLocked drops the queues of targets idle for idleTTL, at most once a
// second, but not one with a lease. Callers hold the lock.
func (w *Writer) pruneLocked() {
	now := w.now()
	if now.Sub(w.pruned) < time.Second {
		return
	}
	w.pruned = now
	for t, q := range w.queues {
		if !q.writing && len(q.pending) == 0 && q.lease == nil && now.Sub(q.idle) > idleTTL {
			delete(w.queues, t)
		}
	}
}

// batch is what one write of a target records: the requests it answers,
// and, if it ends the writer's lease, the references admitted under it.
type batch struct {
	requests []*request
	leased   []Mark
	// until is the end of the lease whose marks leased are: the writer's
	// lease that the write replaces or removes. Another lease of the writer
	// on the object (one whose marks a failed write lost) is folded into the
	// floor instead.
	until time.Time
	// settle: the write removes the writer's lease from the ledger; lease:
	// it stores a new one.
	settle, lease bool
	landed        Landed
}

// drain writes the pending references of t in batches until none are left.
func (w *Writer) drain(t Target, q *queue) {
	for {
		w.lock.Lock()
		b, known := w.nextLocked(q)
		if len(b.requests) == 0 {
			q.writing, q.idle = false, w.now()
			w.lock.Unlock()
			return
		}
		w.lock.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), w.opts.BatchTimeout)
		result, next, until, err := w.write(ctx, t, known, b)
		cancel()

		w.lock.Lock()
		q.known = next
		if !until.IsZero() {
			l := &lease{until: until, object: result.Object, landed: b.landed}
			l.timer = time.AfterFunc(until.Sub(w.now()), func() { w.endLease(t, l) })
			q.lease = l
		}
		w.lock.Unlock()
		for _, r := range b.requests {
			r.done <- outcome{result: result, err: err}
		}
	}
}

// nextLocked takes the next batch of q: references that arrive while a
// write stores a lease are admitted under it once it is stored, the rest
// is written. Callers hold the lock.
func (w *Writer) nextLocked(q *queue) (batch, *state) {
	pending := q.pending
	q.pending = nil
	var b batch
	for _, r := range pending {
		if !r.withdraw && !r.settle {
			if res, ok := w.leasedLocked(q, r.mark); ok {
				r.done <- outcome{result: res}
				continue
			}
		}
		b.requests = append(b.requests, r)
		b.settle = b.settle || r.settle
		if b.landed == nil {
			b.landed = r.landed
		}
	}
	if len(b.requests) == 0 {
		return b, q.known
	}
	streak := !q.marked.IsZero() && w.now().Sub(q.marked) < LeaseStreak
	final := slices.ContainsFunc(b.requests, func(r *request) bool { return r.final })
	if q.lease != nil && (b.settle || !w.now().Before(q.lease.until)) {
		// A lease whose end passed before its timer ran ends with this
		// write, which names its marks, as if the timer had.
		b.settle = true
		q.lease.timer.Stop()
		if b.landed == nil {
			b.landed = q.lease.landed
		}
		b.leased, b.until, q.lease = q.lease.marks, q.lease.until, nil
	}
	marks := len(b.leased) > 0 || slices.ContainsFunc(b.requests, func(r *request) bool { return !r.withdraw && !r.settle })
	if marks {
		q.marked = w.now()
	}
	b.lease = w.opts.Lease > 0 && marks && streak && !final
	if b.landed == nil {
		b.landed = func(string) (time.Time, bool) { return time.Time{}, false }
	}
	return b, q.known
}

// Backoff between attempts after a conflict.
const (
	conflictFirst = 5 * time.Millisecond
	conflictMax   = 200 * time.Millisecond
)

// write records the marks of b on t, starting from known (read first if
// nil), and returns the result, what it then knows of t, and the end of the
// lease it stored, if it took one.
func (w *Writer) write(ctx context.Context, t Target, known *state, b batch) (Result, *state, time.Time, error) {
	var (
		marks     = b.leased
		withdrawn []string
	)
	for _, r := range b.requests {
		switch {
		case r.settle:
		case r.withdraw:
			withdrawn = append(withdrawn, r.mark.ID)
		default:
			marks = append(marks, r.mark)
		}
	}
	wait := conflictFirst
	for {
		if known == nil {
			raw, err := w.objects.Get(ctx, t.Source, t.Cluster, t.Namespace, t.Name)
			if apierrors.IsNotFound(err) {
				return Result{Missing: true}, nil, time.Time{}, nil
			}
			if err != nil {
				return Result{}, nil, time.Time{}, fmt.Errorf("failed to read %s %q: %w: %w", t.Source.Resource.Resource, t.Name, ErrMayBeCleared, err)
			}
			if known, err = stateOf(raw, w.now()); err != nil {
				return Result{}, nil, time.Time{}, err
			}
		}
		_, leased := known.ledger.Lease(w.opts.Replica)
		if len(marks) == 0 && !known.ledger.names(withdrawn) && (!b.settle || !leased) {
			// Nothing to withdraw: the marks were folded, or written over;
			// no lease to end.
			return Result{}, known, time.Time{}, nil
		}
		ledger := known.ledger.With(marks...).Without(withdrawn...)
		if own, ok := ledger.Lease(w.opts.Replica); ok && (b.lease || b.settle) && !own.Until.Equal(b.until) {
			// A lease of ours whose marks are not in this write: a write
			// that was to name them failed. It covers them as a floor.
			ledger.Floor = Later(ledger.Floor, own.Until)
		}
		var until time.Time
		switch {
		case b.lease:
			until = ms(w.now().Add(w.opts.Lease))
			ledger = ledger.WithLease(w.opts.Replica, until)
		case b.settle:
			ledger = ledger.WithoutLease(w.opts.Replica)
		}
		ledger = ledger.Compact(w.now(), b.landed, w.opts.MaxMarks)
		body, err := patchBody(known.resourceVersion, ledger, known.cleared)
		if err != nil {
			return Result{}, nil, time.Time{}, err
		}
		raw, err := w.objects.Patch(ctx, t.Source, t.Cluster, t.Namespace, t.Name, types.MergePatchType, body)
		switch {
		case apierrors.IsNotFound(err):
			return Result{Missing: true}, nil, time.Time{}, nil
		case apierrors.IsConflict(err):
			if w.opts.OnConflict != nil {
				w.opts.OnConflict()
			}
			known = nil
			timer := time.NewTimer(wait/2 + mathrand.N(wait/2+1))
			select {
			case <-ctx.Done():
				timer.Stop()
				return Result{}, nil, time.Time{}, fmt.Errorf("recording the reference on %s %q: %w", t.Source.Resource.Resource, t.Name, ctx.Err())
			case <-timer.C:
			}
			wait = min(2*wait, conflictMax)
			continue
		case err != nil && known.ledger.Clearance != "":
			return Result{}, nil, time.Time{}, fmt.Errorf("failed to record the reference on %s %q: %w: %w", t.Source.Resource.Resource, t.Name, ErrMayBeCleared, err)
		case err != nil:
			return Result{}, nil, time.Time{}, fmt.Errorf("failed to record the reference on %s %q: %w", t.Source.Resource.Resource, t.Name, err)
		}
		meta, err := kcp.ReadMeta(raw)
		if err != nil {
			return Result{}, nil, time.Time{}, fmt.Errorf("failed to read %s %q as patched: %w", t.Source.Resource.Resource, t.Name, err)
		}
		if meta.Terminating {
			// No lease on an object being deleted: its references are
			// refused, each as it comes.
			until = time.Time{}
		}
		return Result{Object: meta}, &state{resourceVersion: meta.ResourceVersion, ledger: ledger}, until, nil
	}
}

// stateOf reads the resourceVersion and the ledger of an object. A ledger
// that does not parse (only the webhook writes it, so this is a bug or an
// older format) is replaced by one whose floor is now: anything it recorded
// is then taken to be in flight for MaxInFlight.
func stateOf(raw []byte, now time.Time) (*state, error) {
	meta, err := kcp.ReadMeta(raw)
	if err != nil {
		return nil, fmt.Errorf("failed to read the object: %w", err)
	}
	value, err := jsonparser.GetString(raw, "metadata", "annotations", depv1alpha1.AnnotationAdmittedReferences)
	if err != nil && !errors.Is(err, jsonparser.KeyPathNotFoundError) {
		value = "malformed"
	}
	ledger, err := Parse(value)
	if err != nil {
		ledger = Ledger{Floor: ms(now)}
	}
	_, cleared := ClearedLabel(raw)
	return &state{resourceVersion: meta.ResourceVersion, ledger: ledger, cleared: cleared}, nil
}

// patchBody is the merge patch that sets the ledger, with resourceVersion
// as a precondition. If uncleared, it removes the label that says the
// object is cleared (api/v1alpha1.LabelCleared), which the state it starts
// from carries: the ledger it writes carries no clearance, so the
// clearer's next listing includes the object again.
func patchBody(resourceVersion string, ledger Ledger, uncleared bool) ([]byte, error) {
	type metadata struct {
		ResourceVersion string             `json:"resourceVersion"`
		Labels          map[string]*string `json:"labels,omitempty"`
		Annotations     map[string]string  `json:"annotations"`
	}
	m := metadata{ResourceVersion: resourceVersion, Annotations: map[string]string{depv1alpha1.AnnotationAdmittedReferences: ledger.String()}}
	if uncleared {
		m.Labels = map[string]*string{depv1alpha1.LabelCleared: nil}
	}
	return json.Marshal(struct {
		Metadata metadata `json:"metadata"`
	}{m})
}

// ClearedLabel reads the label that says an object is cleared
// (api/v1alpha1.LabelCleared) from its JSON: its value, and whether the
// object carries it (not absent, not null).
func ClearedLabel(raw []byte) (string, bool) {
	value, typ, _, err := jsonparser.Get(raw, "metadata", "labels", depv1alpha1.LabelCleared)
	if err != nil || typ == jsonparser.Null {
		return "", false
	}
	if typ != jsonparser.String {
		return "", true
	}
	s, err := jsonparser.ParseString(value)
	if err != nil {
		return "", true
	}
	return s, true
}

// LedgerOf reads the ledger of an object from its JSON; an object without
// one has the empty ledger.
func LedgerOf(raw []byte) (Ledger, error) {
	value, err := jsonparser.GetString(raw, "metadata", "annotations", depv1alpha1.AnnotationAdmittedReferences)
	if errors.Is(err, jsonparser.KeyPathNotFoundError) {
		return Ledger{}, nil
	}
	if err != nil {
		return Ledger{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return Parse(value)
}
