//go:build soak

package soak

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/test/procenv"
)

// protection is what the rules do to a DELETE of a referenced object.
type protection int

const (
	unprotected protection = iota
	// denying: the DELETE is denied.
	denying
	// deferring: the DELETE is denied and, unless it is a dry run,
	// recorded and replayed once nothing references the object (Replay).
	deferring
)

// phase is a set of rules: vm-to-vpc always protects VPCs (Deny); what
// protects Subnets changes.
type phase struct {
	name    string
	subnets protection
	rules   func(e *procenv.Env) []*depv1alpha1.DependencyRule
}

func vmToVPC(e *procenv.Env) *depv1alpha1.DependencyRule {
	return e.Rule("vm-to-vpc", vms, vpcs, ".spec.vpcRef.name", depv1alpha1.DeletionPolicyDeny)
}

func vmToSubnet(e *procenv.Env, policy depv1alpha1.DeletionPolicy) *depv1alpha1.DependencyRule {
	return e.Rule("vm-to-subnet", vms, subnets, ".spec.subnetRef.name", policy)
}

// phases are the rule sets the soak cycles through, one every
// SOAK_RULE_SECONDS: a second rule added, its deletionPolicy toggled,
// removed; a second dependency added to the first rule in place, removed.
var phases = []phase{
	{"vpc", unprotected, func(e *procenv.Env) []*depv1alpha1.DependencyRule {
		return []*depv1alpha1.DependencyRule{vmToVPC(e)}
	}},
	{"+rule", denying, func(e *procenv.Env) []*depv1alpha1.DependencyRule {
		return []*depv1alpha1.DependencyRule{vmToVPC(e), vmToSubnet(e, depv1alpha1.DeletionPolicyDeny)}
	}},
	{"+rule/Replay", deferring, func(e *procenv.Env) []*depv1alpha1.DependencyRule {
		return []*depv1alpha1.DependencyRule{vmToVPC(e), vmToSubnet(e, depv1alpha1.DeletionPolicyReplay)}
	}},
	{"vpc", unprotected, func(e *procenv.Env) []*depv1alpha1.DependencyRule {
		return []*depv1alpha1.DependencyRule{vmToVPC(e)}
	}},
	{"+dependency", denying, func(e *procenv.Env) []*depv1alpha1.DependencyRule {
		r := vmToVPC(e)
		r.Spec.Dependencies = append(r.Spec.Dependencies, e.Dependency(subnets, ".spec.subnetRef.name"))
		return []*depv1alpha1.DependencyRule{r}
	}},
}

// view is what is known of the rules at a moment. Each type's epoch
// changes when a change of the rules that affects it starts and when it is
// settled; settled says whether the type's protection is known to be in
// force as the current rules say.
type view struct {
	phase                     string
	subnets                   protection
	vpcEpoch, subnetEpoch     int64
	vpcSettled, subnetSettled bool
}

// protects returns what the rules of the view do to a DELETE of a
// referenced object of gvr.
func (v view) protects(gvr schema.GroupVersionResource) protection {
	if gvr == subnets {
		return v.subnets
	}
	return denying
}

// counts reports whether a decision about gvr, sent under v and answered
// under w, counts: the protection of gvr was settled, and did not change,
// for the whole request.
func counts(v, w view, gvr schema.GroupVersionResource) bool {
	if gvr == subnets {
		return v.subnetSettled && w.subnetSettled && v.subnetEpoch == w.subnetEpoch
	}
	return v.vpcSettled && w.vpcSettled && v.vpcEpoch == w.vpcEpoch
}

// change is a change of the rules.
type change struct {
	from, to string
	at, took time.Duration // since the churn started, and until settled
	err      error
}

// rules applies the phases and tells the workers what is in force.
type rules struct {
	s    *soak
	lock sync.Mutex
	v    view
	// applied are the rules as last written, by name.
	applied map[string]*depv1alpha1.DependencyRule
	// start is when the churn started.
	start   time.Time
	changes []change
}

func newRules(s *soak) *rules {
	return &rules{s: s, applied: map[string]*depv1alpha1.DependencyRule{}, start: time.Now()}
}

func (r *rules) view() view {
	r.lock.Lock()
	defer r.lock.Unlock()
	return r.v
}

// cycle applies the next phase every SOAK_RULE_SECONDS after start until
// the soak stops.
func (r *rules) cycle(ctx context.Context, start time.Time) {
	r.lock.Lock()
	r.start = start
	r.lock.Unlock()
	if r.s.cfg.rulePeriod <= 0 {
		return
	}
	for k := 1; ; k++ {
		select {
		case <-r.s.stopped:
			return
		case <-time.After(time.Until(start.Add(time.Duration(k) * r.s.cfg.rulePeriod))):
		}
		if r.s.stopping() {
			return
		}
		_ = r.apply(ctx, k) // recorded in changes
	}
}

// apply writes the rules of phase k (modulo the number of phases) and
// waits until they are in force (see settle).
func (r *rules) apply(ctx context.Context, k int) error {
	p := phases[k%len(phases)]
	desired := map[string]*depv1alpha1.DependencyRule{}
	for _, rule := range p.rules(r.s.env) {
		desired[rule.Name] = rule
	}
	var removed []string
	for name := range r.applied {
		if desired[name] == nil {
			removed = append(removed, name)
		}
	}
	old, ok := r.applied["vm-to-vpc"]
	vpcChanged := !ok || !equality.Semantic.DeepEqual(old.Spec, desired["vm-to-vpc"].Spec)

	r.lock.Lock()
	from := r.v.phase
	r.v.subnetEpoch++
	r.v.subnetSettled = false
	if vpcChanged {
		r.v.vpcEpoch++
		r.v.vpcSettled = false
	}
	began := time.Now()
	r.lock.Unlock()

	err := r.write(ctx, desired, removed)
	if err == nil {
		err = r.settle(ctx, desired, removed, p)
	}

	r.lock.Lock()
	defer r.lock.Unlock()
	r.v.phase, r.v.subnets = p.name, p.subnets
	r.v.subnetEpoch++
	r.v.subnetSettled = err == nil
	if vpcChanged {
		r.v.vpcEpoch++
		r.v.vpcSettled = err == nil
	}
	r.changes = append(r.changes, change{from: from, to: p.name, at: began.Sub(r.start), took: time.Since(began), err: err})
	return err
}

// write creates, updates and deletes rules in the compute provider's
// workspace (the dependent's) until the desired ones are there.
func (r *rules) write(ctx context.Context, desired map[string]*depv1alpha1.DependencyRule, removed []string) error {
	c := r.s.env.Cli.Cluster(r.s.env.Compute)
	for name, rule := range desired {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got := &depv1alpha1.DependencyRule{}
			err := c.Get(ctx, client.ObjectKey{Name: name}, got)
			switch {
			case apierrors.IsNotFound(err):
				return c.Create(ctx, procenv.ServerCopy(rule))
			case err != nil:
				return err
			case equality.Semantic.DeepEqual(got.Spec, rule.Spec):
				return nil
			}
			got.Spec = rule.Spec
			return c.Update(ctx, got)
		})
		if err != nil {
			return fmt.Errorf("writing rule %s: %w", name, err)
		}
	}
	for _, name := range removed {
		if err := client.IgnoreNotFound(c.Delete(ctx, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: name}})); err != nil {
			return fmt.Errorf("deleting rule %s: %w", name, err)
		}
	}
	r.applied = desired
	return nil
}

// settleTimeout is how long a change of the rules may take to be in force.
const settleTimeout = 3 * time.Minute

// settle waits until the rules are in force: every desired rule is Ready
// and DependentsIndexed at its current generation, every removed rule is
// gone, and in every tenant a dry-run DELETE of the probe VPC is denied and
// one of the probe Subnet answers as the phase says (both are referenced by
// the probe VM).
func (r *rules) settle(ctx context.Context, desired map[string]*depv1alpha1.DependencyRule, removed []string, p phase) error {
	var why string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, settleTimeout, true, func(context.Context) (bool, error) {
		why = r.unsettled(ctx, desired, removed, p)
		return why == "", nil
	})
	if err != nil {
		return fmt.Errorf("the rules of phase %q were not in force after %s: %s", p.name, settleTimeout, why)
	}
	return nil
}

// unsettled returns why the rules of p are not in force yet, or "".
func (r *rules) unsettled(ctx context.Context, desired map[string]*depv1alpha1.DependencyRule, removed []string, p phase) string {
	c := r.s.env.Cli.Cluster(r.s.env.Compute)
	names := make([]string, 0, len(desired))
	for name := range desired {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		got := &depv1alpha1.DependencyRule{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
			return fmt.Sprintf("reading rule %s: %v", name, err)
		}
		for _, typ := range []string{depv1alpha1.ConditionReady, depv1alpha1.ConditionDependentsIndexed} {
			cond := meta.FindStatusCondition(got.Status.Conditions, typ)
			if cond == nil {
				return fmt.Sprintf("rule %s has no %s condition", name, typ)
			}
			if cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != got.Generation {
				return fmt.Sprintf("rule %s: %s=%s (%s: %s) at generation %d, want True at %d", name, typ, cond.Status, cond.Reason, cond.Message, cond.ObservedGeneration, got.Generation)
			}
		}
	}
	for _, name := range removed {
		err := c.Get(ctx, client.ObjectKey{Name: name}, &depv1alpha1.DependencyRule{})
		if !apierrors.IsNotFound(err) {
			return fmt.Sprintf("rule %s is not gone yet (%v)", name, err)
		}
	}
	for _, tn := range r.s.tenants {
		for _, gvr := range []schema.GroupVersionResource{vpcs, subnets} {
			err := tn.dyn.Resource(gvr).Namespace("probe").Delete(ctx, "probe", dryRun)
			got := classify(err)
			want := answerDenied
			if gvr == subnets && p.subnets == unprotected {
				want = answerAllowed
			}
			if got != want {
				return fmt.Sprintf("tenant %s: a dry-run DELETE of the probe %s: %s (%v), want %s", tn.name, procenv.Kinds[gvr.Resource], got, err, want)
			}
		}
	}
	return ""
}
