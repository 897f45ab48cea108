package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/index/route"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// FieldOwner is the field manager under which the elected replica applies
// the ReferencesResolved condition: another manager than those of the
// webhook's other conditions, whose applies would otherwise remove it.
const FieldOwner = "dependency-webhook-audit"

// Defaults of Options.
const (
	// DefaultGracePeriod is how long a reference may name a missing object
	// before it is reported (--dangling-grace-period).
	DefaultGracePeriod = 5 * time.Minute
	// DefaultInterval is how often a pass runs without a change of the
	// index.
	DefaultInterval = 10 * time.Second
	// DefaultDebounce is the least time between a change of the index and
	// the pass it causes.
	DefaultDebounce = 2 * time.Second
	// DefaultMaxEvents is how many Events a pass records at most.
	DefaultMaxEvents = 100
)

// samplesInCondition is how many dangling references a condition names.
const samplesInCondition = 5

// startupWait is how long after the Auditor started it leaves a rule's
// condition as it is while the references are only being synced: a newly
// elected replica lists the targets first, and should not make every
// rule's condition flap through Unknown.
const startupWait = time.Minute

// eventBudget bounds the time a pass spends recording Events; those left
// are recorded by the next pass.
const eventBudget = 20 * time.Second

// Eventer records Events about objects in their workspace; *objects.Client
// implements it.
type Eventer interface {
	Event(ctx context.Context, src index.Source, kind string, obj kcp.Meta, eventType, reason, msg string) error
}

// ConditionWriter writes a condition of a rule, if it differs from what
// the rule has (see conditions.NewWriter).
type ConditionWriter func(ctx context.Context, rule kcp.ObjectKey, condition func(generation int64) metav1.Condition) error

// Options configure an Auditor.
type Options struct {
	// GracePeriod is how long a reference may name a missing object before
	// it is reported. Default DefaultGracePeriod.
	GracePeriod time.Duration
	// Interval is how often a pass runs without a change of the index.
	// Default DefaultInterval.
	Interval time.Duration
	// Debounce is the least time between a change of the index and the
	// pass it causes. Default DefaultDebounce.
	Debounce time.Duration
	// MaxEvents is how many Events a pass records at most; the next pass
	// records those left. Default DefaultMaxEvents.
	MaxEvents int
	// Metrics, if set, is where the number of dangling references is
	// reported.
	Metrics *Metrics
	// Reader, if set, reads an object that a reference names and its set
	// of targets lacks before the reference counts as dangling (see
	// confirm); without it, such a reference is dangling.
	Reader Reader
}

// Auditor finds and reports dangling references; see the package
// documentation. It is a manager.LeaderElectionRunnable that runs on the
// webhook's elected replica.
type Auditor struct {
	rules  Rules
	ix     Index
	events Eventer
	write  ConditionWriter
	opts   Options
	now    func() time.Time

	// Only Start's goroutine uses what follows.
	started time.Time
	// findings are the references to missing objects, as of the last pass.
	findings map[refKey]*finding
	// checkedOnce are the pairs checked since the Auditor started.
	checkedOnce map[pair]bool
	// hidden are objects missing from their set of targets that a read
	// found to exist, and when (see confirm).
	hidden map[targetObject]time.Time
}

// New returns an Auditor of the references that the rules of rules make,
// as ix holds them, which records Events with events (none if nil) and
// writes conditions with write (none if nil: a webhook that reads only
// some shards sees only some references, and several would contradict
// each other).
func New(rules Rules, ix Index, events Eventer, write ConditionWriter, opts Options) *Auditor {
	if opts.GracePeriod <= 0 {
		opts.GracePeriod = DefaultGracePeriod
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = DefaultMaxEvents
	}
	return &Auditor{rules: rules, ix: ix, events: events, write: write, opts: opts, now: time.Now,
		findings: map[refKey]*finding{}, checkedOnce: map[pair]bool{}, hidden: map[targetObject]time.Time{}}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (a *Auditor) NeedLeaderElection() bool {
	return true
}

// Start implements manager.Runnable: it has the index watch the protected
// types, and runs a pass at once, after changes of the index (at most
// every Debounce), when a missing object's grace period ends, and every
// Interval, until ctx is done.
func (a *Auditor) Start(ctx context.Context) error {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithName("audit"))
	a.ix.WatchTargets(true)
	defer a.ix.WatchTargets(false)
	a.started = a.now()
	for {
		a.pass(ctx)
		timer := time.NewTimer(a.next(a.now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		case <-a.ix.Contents():
			timer.Stop()
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(a.opts.Debounce):
			}
		}
	}
}

// next returns how long after now the next pass is due without a change of
// the index: Interval, or less when the grace period of a reference found
// missing ends before.
func (a *Auditor) next(now time.Time) time.Duration {
	wait := a.opts.Interval
	for _, f := range a.findings {
		if d := f.since.Add(a.opts.GracePeriod).Sub(now); d > 0 && d < wait {
			wait = d
		}
	}
	return wait
}

// pass detects dangling references and reports them.
func (a *Auditor) pass(ctx context.Context) {
	now := a.now()
	d := a.detect(ctx, now)
	dangling := a.dangling(now)
	a.opts.Metrics.set(d.sources, dangling)
	a.report(ctx, d, now)
	a.record(ctx, dangling)
}

// dangling returns the findings missing for the grace period or longer.
func (a *Auditor) dangling(now time.Time) []*finding {
	var out []*finding
	for _, f := range a.findings {
		if now.Sub(f.since) >= a.opts.GracePeriod {
			out = append(out, f)
		}
	}
	return out
}

// report writes the condition of every rule.
func (a *Auditor) report(ctx context.Context, d detection, now time.Time) {
	if a.write == nil {
		return
	}
	dangling, pending := map[kcp.ObjectKey][]*finding{}, map[kcp.ObjectKey]bool{}
	for _, f := range a.findings {
		for _, r := range f.rules {
			if now.Sub(f.since) >= a.opts.GracePeriod {
				dangling[r] = append(dangling[r], f)
			} else if f.early {
				pending[r] = true
			}
		}
	}
	logger := log.FromContext(ctx)
	for _, rs := range d.rules {
		c, ok := a.condition(rs, dangling[rs.rule.Key], pending[rs.rule.Key], now)
		if !ok {
			continue
		}
		if err := a.write(ctx, rs.rule.Key, c); err != nil && !apierrors.IsNotFound(err) {
			logger.V(1).Info("Failed to report the dangling references of a rule", "rule", rs.rule.Key, "error", err.Error())
		}
	}
}

// condition returns the ReferencesResolved condition of a rule whose pass
// ended in rs, with its dangling references; false to leave the rule's
// condition as it is: while the Auditor has just started and only syncs
// (startupWait), or while a reference it found missing in its first check
// may have been missing for longer than it knows (pending) and nothing
// dangles yet.
func (a *Auditor) condition(rs *ruleStatus, dangling []*finding, pending bool, now time.Time) (func(int64) metav1.Condition, bool) {
	set := func(status metav1.ConditionStatus, reason, msg string) func(int64) metav1.Condition {
		return func(generation int64) metav1.Condition {
			return metav1.Condition{Type: depv1alpha1.ConditionReferencesResolved, Status: status, Reason: reason, Message: msg, ObservedGeneration: generation}
		}
	}
	grace := a.opts.GracePeriod.String()
	switch {
	case len(dangling) > 0:
		noun := "references name objects that do not exist"
		if len(dangling) == 1 {
			noun = "reference names an object that does not exist"
		}
		return set(metav1.ConditionFalse, depv1alpha1.ReasonDangling, fmt.Sprintf("%d %s (missing for %s or longer): %s", len(dangling), noun, grace, samples(dangling, samplesInCondition))), true
	case len(rs.unknown) > 0:
		if rs.syncing && now.Sub(a.started) < startupWait {
			return nil, false
		}
		return set(metav1.ConditionUnknown, rs.unknownReason, "Cannot tell whether every reference names an existing object: "+strings.Join(rs.unknown, "; ")), true
	case pending:
		return nil, false
	case !rs.checked:
		return set(metav1.ConditionUnknown, depv1alpha1.ReasonTargetsUnresolved, "No protected workspace binds the dependencies APIExport yet"), true
	default:
		return set(metav1.ConditionTrue, depv1alpha1.ReasonAllResolved,
			"Every reference of the rule's dependents names an object that exists; one to a missing object is reported after "+grace), true
	}
}

// record records the Event of every dangling reference that has none yet,
// the oldest first, at most MaxEvents and for at most eventBudget.
func (a *Auditor) record(ctx context.Context, dangling []*finding) {
	if a.events == nil {
		return
	}
	todo := slices.DeleteFunc(slices.Clone(dangling), func(f *finding) bool { return f.evented })
	slices.SortFunc(todo, func(x, y *finding) int {
		if c := x.since.Compare(y.since); c != 0 {
			return c
		}
		return strings.Compare(x.message(), y.message())
	})
	if len(todo) > a.opts.MaxEvents {
		todo = todo[:a.opts.MaxEvents]
	}
	ctx, cancel := context.WithTimeout(ctx, eventBudget)
	defer cancel()
	logger := log.FromContext(ctx)
	for _, f := range todo {
		if ctx.Err() != nil {
			return
		}
		err := a.events.Event(ctx, f.key.dependent, f.kind, f.meta, corev1.EventTypeWarning, depv1alpha1.EventReasonDanglingReference, f.message())
		if err != nil {
			logger.V(1).Info("Could not record an Event on a dependent with a dangling reference (does its provider's APIExport claim events?)",
				"dependent", f.dependentString(), "cluster", f.key.cluster, "error", err.Error())
			if retry(err) {
				continue
			}
		}
		f.evented = true
	}
}

// retry reports whether an Event that failed with err is worth recording
// again at the next pass: kcp or the index was not ready. Anything else
// (no claim of events, no grant, the dependent's namespace gone) would
// fail again.
func retry(err error) bool {
	_, transient := vw.RetryCause(err)
	return transient || errors.Is(err, route.ErrNotInspected) || errors.Is(err, context.DeadlineExceeded)
}
