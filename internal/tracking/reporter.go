package tracking

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

// FieldOwner is the field manager under which the elected replica applies
// the ReferencesTracked condition: another manager than those of the
// webhook's other conditions, whose applies would otherwise remove it.
const FieldOwner = "dependency-webhook-tracking"

// Rules are the registered rules; *registry.Registry implements it.
type Rules interface {
	Rules() []*registry.Rule
	GuardOf(key kcp.ObjectKey) (registry.Guard, bool)
	Labelling(dependent registry.Target) (registry.Labelling, bool)
	Changes() <-chan struct{}
}

// Dependents finds, per shard, a dependent of a type to probe the shard's
// admission with; *index.Index implements it.
type Dependents interface {
	DependentPerShard(src index.Source) map[string]kcp.Meta
}

// Activation tells since when a webhook is in effect on a shard, probing
// in the background, and why the last probe did not show it; *Tracker
// implements it.
type Activation interface {
	Since(ctx context.Context, key Key, obj Object) (time.Time, bool)
	Why(key Key) string
}

// Grants tells whether the webhook may patch the objects of a protected
// source through its provider's virtual workspace.
type Grants interface {
	MayPatch(ctx context.Context, src index.Source) (bool, error)
}

// ConditionWriter writes a condition of a rule, if it differs from what
// the rule has (see conditions.NewWriter).
type ConditionWriter func(ctx context.Context, rule kcp.ObjectKey, condition func(generation int64) metav1.Condition) error

// Reporter writes the ReferencesTracked condition of every rule; see the
// package documentation. It is a manager.LeaderElectionRunnable that runs
// on the webhook's elected replica.
type Reporter struct {
	rules      Rules
	grants     Grants
	dependents Dependents
	activation Activation
	write      ConditionWriter
	interval   time.Duration
	identity   string
}

// NewReporter returns a Reporter of the rules, which checks grants with
// grants and, with activation, that the labelling webhook of the rule's
// dependents is in effect on every shard that holds some (found through
// dependents), every interval (default 30s, every few seconds while it
// waits for a probe) and after changes of the rules; it names identity
// (the webhook's user) in its messages.
func NewReporter(rules Rules, grants Grants, dependents Dependents, activation Activation, write ConditionWriter, interval time.Duration, identity string) *Reporter {
	if interval <= 0 {
		interval = 30 * time.Second
	}
	return &Reporter{rules: rules, grants: grants, dependents: dependents, activation: activation, write: write, interval: interval, identity: identity}
}

// pendingInterval is how soon the Reporter looks again while a rule waits
// for a probe.
const pendingInterval = 3 * time.Second

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (r *Reporter) NeedLeaderElection() bool {
	return true
}

// Start implements manager.Runnable.
func (r *Reporter) Start(ctx context.Context) error {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithName("tracking"))
	for {
		wait := r.interval
		if r.Pass(ctx) {
			wait = pendingInterval
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		case <-r.rules.Changes():
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

// Pass writes the condition of every rule once, and reports whether one
// waits for a probe.
func (r *Reporter) Pass(ctx context.Context) bool {
	granted := map[index.Source]bool{}
	pending := false
	for _, rule := range r.rules.Rules() {
		if ctx.Err() != nil {
			return pending
		}
		condition, waiting := r.condition(ctx, rule, granted)
		pending = pending || waiting
		if err := r.write(ctx, rule.Key, condition); err != nil && !apierrors.IsNotFound(err) {
			log.FromContext(ctx).V(1).Info("Failed to report whether a rule's references are tracked", "rule", rule.Key, "error", err.Error())
		}
	}
	return pending
}

// condition computes the ReferencesTracked condition of rule, and whether
// it waits for a probe; granted remembers, within a pass, what the grants
// said of each protected source.
func (r *Reporter) condition(ctx context.Context, rule *registry.Rule, granted map[index.Source]bool) (func(int64) metav1.Condition, bool) {
	set := func(status metav1.ConditionStatus, reason, msg string) func(int64) metav1.Condition {
		return func(generation int64) metav1.Condition {
			return metav1.Condition{Type: depv1alpha1.ConditionReferencesTracked, Status: status, Reason: reason, Message: msg, ObservedGeneration: generation}
		}
	}
	// The check of new references records the references of a type whose
	// dependents cannot be labelled.
	l, found := r.rules.Labelling(registry.Target{Cluster: rule.Key.Cluster, Resource: rule.Dependent.Resource.GroupResource()})
	if !rule.Labelled && (!found || l.Labellable) {
		return set(metav1.ConditionFalse, depv1alpha1.ReasonNotLabelled,
			"The dependents are not labelled with what they reference (see DependentsLabelled): the labelling webhook records new references, so allowed deletes are confirmed with a live read"), false
	}
	guard, ok := r.rules.GuardOf(rule.Key)
	if !ok {
		return set(metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "The rule is not registered yet"), false
	}
	var tracked, missing []string
	for _, ref := range guard.References {
		src := ref.Target
		if src.Export.Name == "" {
			continue // not bound: protects nothing yet
		}
		may, seen := granted[src]
		if !seen {
			var err error
			if may, err = r.grants.MayPatch(ctx, src); err != nil {
				log.FromContext(ctx).V(1).Info("Cannot tell whether the webhook may patch a protected type", "source", src, "error", err.Error())
				return set(metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, fmt.Sprintf("Cannot tell whether the webhook may patch %s: %v", src, err)), false
			}
			granted[src] = may
		}
		name := src.Resource.GroupResource().String()
		if may {
			tracked = append(tracked, name)
			continue
		}
		missing = append(missing, fmt.Sprintf("patch on apiexports/content of the APIExport %s in the workspace of %s", src.Export.Name, name))
	}
	slices.Sort(tracked)
	tracked = slices.Compact(tracked)
	if len(missing) > 0 {
		slices.Sort(missing)
		who := "the webhook"
		if r.identity != "" {
			who = fmt.Sprintf("the webhook's user %q", r.identity)
		}
		return set(metav1.ConditionFalse, depv1alpha1.ReasonAccessDenied, fmt.Sprintf(
			"New references cannot be recorded on the objects they name, so allowed deletes of them are confirmed with a live read; grant %s %s (its provider's webhook-access.yaml)",
			who, strings.Join(slices.Compact(missing), "; "))), false
	}
	if len(tracked) == 0 {
		return set(metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "No type the rule protects is served by a workspace that binds the dependencies APIExport yet"), false
	}
	if msg := r.inEffect(ctx, rule, l, found); msg != "" {
		return set(metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, msg), true
	}
	return set(metav1.ConditionTrue, depv1alpha1.ReasonTracked, fmt.Sprintf(
		"New references to %s are recorded on the objects they name before the dependent is stored; deletes that nothing references are decided without reading dependents once nothing can be in flight",
		strings.Join(tracked, ", "))), false
}

// inEffect checks, on every shard that holds dependents of the rule's
// type, that the webhook that records their references is in effect (see
// Tracker): the labelling webhook with the scheme of the type's current
// rules (l, if found), or, for a type whose dependents cannot be labelled,
// the check of new references for the rule's references. It returns what
// it waits for, empty if nothing.
func (r *Reporter) inEffect(ctx context.Context, rule *registry.Rule, l registry.Labelling, found bool) string {
	if r.activation == nil || r.dependents == nil {
		return ""
	}
	if !found {
		return "Waiting for the rules of the dependent type to be registered; until then allowed deletes are confirmed with a live read"
	}
	webhook, key, obj := "the labelling webhook", Key{Kind: KindLabelling, Source: rule.Dependent, Scheme: l.Scheme.Fingerprint}, Object{}
	if !l.Labellable {
		refs := make([]fieldpath.Reference, len(rule.References))
		for i, ref := range rule.References {
			refs[i] = ref.Path
		}
		webhook, key, obj = "the check of new references", Key{Kind: KindCheck, Source: rule.Dependent, Scheme: CheckScheme(refs)}, Object{References: refs}
	}
	perShard := r.dependents.DependentPerShard(rule.Dependent)
	if len(perShard) == 0 {
		return fmt.Sprintf("Waiting for a dependent to show that %s records new references (there is none yet); until then allowed deletes are confirmed with a live read", webhook)
	}
	for _, url := range slices.Sorted(maps.Keys(perShard)) {
		m := perShard[url]
		key.Shard = url
		obj.Cluster, obj.Namespace, obj.Name = m.Cluster, m.Namespace, m.Name
		if _, ok := r.activation.Since(ctx, key, obj); !ok {
			why := ""
			if w := r.activation.Why(key); w != "" {
				why = " (" + w + ")"
			}
			return fmt.Sprintf("Waiting to see %s of the current rules in effect on the shard of %s%s; until then allowed deletes are confirmed with a live read", webhook, url, why)
		}
	}
	return ""
}

// SSARGrants asks kcp with SelfSubjectAccessReviews in the workspace of the
// protected source's APIExport whether the webhook may patch its content:
// the authorization kcp's APIExport virtual workspace applies to a patch
// through it. Answers are kept for a while.
type SSARGrants struct {
	cfg        *rest.Config
	frontProxy string
	ttl        time.Duration
	now        func() time.Time

	lock    sync.Mutex
	answers map[index.Source]answer
}

type answer struct {
	allowed bool
	at      time.Time
}

// NewSSARGrants returns grants asked with the credentials of cfg through
// the server at frontProxy (without a /clusters/ path), each answer kept
// for ttl.
func NewSSARGrants(cfg *rest.Config, frontProxy string, ttl time.Duration) *SSARGrants {
	return &SSARGrants{cfg: cfg, frontProxy: strings.TrimSuffix(frontProxy, "/"), ttl: ttl, now: time.Now, answers: map[index.Source]answer{}}
}

// MayPatch implements Grants.
func (g *SSARGrants) MayPatch(ctx context.Context, src index.Source) (bool, error) {
	now := g.now()
	g.lock.Lock()
	a, ok := g.answers[src]
	g.lock.Unlock()
	if ok && now.Sub(a.at) < g.ttl {
		return a.allowed, nil
	}
	cfg := rest.CopyConfig(g.cfg)
	cfg.Host = g.frontProxy + src.Export.Cluster.Path().RequestPath()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, err
	}
	review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group: "apis.kcp.io", Resource: "apiexports", Subresource: "content", Name: src.Export.Name, Verb: "patch",
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("failed to ask whether the webhook may patch %s: %w", src, err)
	}
	g.lock.Lock()
	g.answers[src] = answer{allowed: review.Status.Allowed, at: now}
	g.lock.Unlock()
	return review.Status.Allowed, nil
}
