//go:build soak

package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/opendefensecloud/dependency-controller/test/procenv"
)

// answer is what kcp answered to a DELETE.
type answer int

const (
	answerAllowed answer = iota
	// answerDenied: refused, naming the dependents that reference the
	// object (under Replay, a dry run: "would be deferred").
	answerDenied
	// answerDeferred: refused and recorded for replay (Replay).
	answerDeferred
	// answerGone: the object does not exist (any more).
	answerGone
	// answerError: anything else: a webhook that could not decide ("retry",
	// fail closed), a timeout, kcp unavailable.
	answerError
)

var answers = []answer{answerDenied, answerDeferred, answerAllowed, answerGone, answerError}

func (a answer) String() string {
	return [...]string{"allowed", "denied", "deferred", "gone", "error"}[a]
}

func (a answer) denied() bool {
	return a == answerDenied || a == answerDeferred
}

// classify returns the answer that err (of a DELETE) is.
func classify(err error) answer {
	switch {
	case err == nil:
		return answerAllowed
	case apierrors.IsNotFound(err):
		return answerGone
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "is still referenced by"):
		if strings.Contains(err.Error(), "its deletion is deferred") {
			return answerDeferred
		}
		return answerDenied
	}
	return answerError
}

// stuckAfter is how long a DELETE of an object whose last reference went
// may still be denied (the index has not seen the reference go yet).
const stuckAfter = time.Minute

// stats are what the workers did and saw.
type stats struct {
	lock sync.Mutex
	// counts are the operations, by name.
	counts map[string]int
	// deletes are the answers to DELETEs of targets, by what was deleted.
	deletes map[string]map[answer]int
	// denied and allowed are the latencies of the DELETEs of targets with
	// that answer (deferred counts as denied): of the current sampling
	// interval and of the whole run.
	denied, allowed, allDenied, allAllowed []time.Duration
	// wrong are the wrong decisions, with the time since the churn started.
	wrong []string
	// uncounted are the decisions that would have been wrong had the rules
	// been settled, by description.
	uncounted map[string]int
	// errors are the failed requests by operation and reason, and the
	// first few of them.
	errors        map[string]int
	errorExamples []string
	start         time.Time
}

func newStats() *stats {
	return &stats{counts: map[string]int{}, deletes: map[string]map[answer]int{}, uncounted: map[string]int{}, errors: map[string]int{}, start: time.Now()}
}

func (st *stats) add(name string) {
	st.lock.Lock()
	defer st.lock.Unlock()
	st.counts[name]++
}

func (st *stats) deleted(what string, a answer, took time.Duration) {
	st.lock.Lock()
	defer st.lock.Unlock()
	if st.deletes[what] == nil {
		st.deletes[what] = map[answer]int{}
	}
	st.deletes[what][a]++
	switch {
	case a.denied():
		st.denied = append(st.denied, took)
		st.allDenied = append(st.allDenied, took)
	case a == answerAllowed:
		st.allowed = append(st.allowed, took)
		st.allAllowed = append(st.allAllowed, took)
	}
}

func (st *stats) wrongDecision(format string, args ...any) {
	st.lock.Lock()
	defer st.lock.Unlock()
	st.wrong = append(st.wrong, fmt.Sprintf("%s: ", time.Since(st.start).Round(time.Second))+fmt.Sprintf(format, args...))
}

func (st *stats) uncountedDecision(what string) {
	st.lock.Lock()
	defer st.lock.Unlock()
	st.uncounted[what]++
}

func (st *stats) failed(op string, err error) {
	st.lock.Lock()
	defer st.lock.Unlock()
	st.errors[fmt.Sprintf("%s: %s", op, apierrors.ReasonForError(err))]++
	if len(st.errorExamples) < 10 {
		st.errorExamples = append(st.errorExamples, fmt.Sprintf("%s: %s: %v", time.Since(st.start).Round(time.Second), op, err))
	}
}

// interval returns the latencies of the current interval and starts the
// next one, with the number of wrong decisions so far.
func (st *stats) interval() (denied, allowed []time.Duration, wrong int) {
	st.lock.Lock()
	defer st.lock.Unlock()
	denied, allowed = st.denied, st.allowed
	st.denied, st.allowed = nil, nil
	return denied, allowed, len(st.wrong)
}

// worker churns in a namespace of a tenant.
type worker struct {
	s      *soak
	tenant *tenant
	ns     string
	round  int
}

func (w *worker) resource(gvr schema.GroupVersionResource) dynamic.ResourceInterface {
	return w.tenant.dyn.Resource(gvr).Namespace(w.ns)
}

// where names an object of the worker's namespace in messages.
func (w *worker) where(gvr schema.GroupVersionResource, name string) string {
	return fmt.Sprintf("%s %s/%s/%s", procenv.Kinds[gvr.Resource], w.tenant.name, w.ns, name)
}

// run repeats rounds until the soak stops.
func (w *worker) run(ctx context.Context) {
	for !w.s.stopping() {
		w.round++
		w.once(ctx)
		w.s.stats.add("rounds")
		time.Sleep(w.s.cfg.pause)
	}
}

// once is a round: targets created, a dependent referencing them, the
// referenced targets' DELETEs, the dependent changed to reference another
// target, the targets that must still be there checked, and everything
// deleted, the dependent first.
func (w *worker) once(ctx context.Context) {
	vpc1, vpc2 := fmt.Sprintf("vpc-%d-a", w.round), fmt.Sprintf("vpc-%d-b", w.round)
	subnet, vm := fmt.Sprintf("subnet-%d", w.round), fmt.Sprintf("vm-%d", w.round)
	// live are the targets that may still exist, for the cleanup.
	type target struct {
		gvr  schema.GroupVersionResource
		name string
	}
	var live []target
	vmCreated := false
	defer func() {
		if vmCreated {
			w.deleteDependent(ctx, vm)
		}
		for _, tg := range live {
			w.deleteUnreferenced(ctx, tg.gvr, tg.name)
		}
	}()
	for _, tg := range []target{{vpcs, vpc1}, {vpcs, vpc2}, {subnets, subnet}} {
		if !w.create(ctx, tg.gvr, tg.name, map[string]any{}) {
			return
		}
		live = append(live, tg)
	}
	referenced := w.s.rules.view()
	if !w.create(ctx, vms, vm, vmSpec(vpc1, subnet)) {
		vmCreated = true // perhaps it was created after all
		return
	}
	vmCreated = true

	w.deleteReferenced(ctx, vpcs, w.ns, vpc1, metav1.DeleteOptions{}, "referenced VPC")
	subnetGone := w.deleteReferenced(ctx, subnets, w.ns, subnet, metav1.DeleteOptions{}, "referenced Subnet") == answerAllowed

	retargeted := w.s.rules.view()
	if !w.retarget(ctx, vm, vpc2) {
		return
	}
	w.deleteReferenced(ctx, vpcs, w.ns, vpc2, metav1.DeleteOptions{}, "referenced VPC")
	w.deleteUnreferenced(ctx, vpcs, vpc1) // formerly referenced
	live = live[1:]

	w.mustExist(ctx, vpcs, vpc2, retargeted, vm)
	if !subnetGone {
		w.mustExist(ctx, subnets, subnet, referenced, vm)
	}
}

func (w *worker) create(ctx context.Context, gvr schema.GroupVersionResource, name string, spec map[string]any) bool {
	_, err := w.resource(gvr).Create(ctx, procenv.NewObject(gvr, w.ns, name, spec), metav1.CreateOptions{})
	if err != nil {
		w.s.stats.failed("create "+procenv.Kinds[gvr.Resource], err)
		return false
	}
	w.s.stats.add("creates")
	return true
}

// retarget changes the VM to reference another VPC.
func (w *worker) retarget(ctx context.Context, vm, vpc string) bool {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := w.resource(vms).Get(ctx, vm, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(obj.Object, vpc, "spec", "vpcRef", "name"); err != nil {
			return err
		}
		_, err = w.resource(vms).Update(ctx, obj, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		w.s.stats.failed("update VirtualMachine", err)
		return false
	}
	w.s.stats.add("updates")
	return true
}

// deleteDependent deletes a VM (nothing protects VMs), trying again for a
// minute on errors.
func (w *worker) deleteDependent(ctx context.Context, vm string) {
	deadline := time.Now().Add(time.Minute)
	for {
		err := w.resource(vms).Delete(ctx, vm, metav1.DeleteOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			w.s.stats.add("VM deletes")
			return
		}
		w.s.stats.failed("delete VirtualMachine", err)
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Second)
	}
}

// deleteReferenced deletes an object that a VM references (opts may make
// it a dry run) and checks the answer against the rules in force.
func (w *worker) deleteReferenced(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, opts metav1.DeleteOptions, what string) answer {
	before := w.s.rules.view()
	start := time.Now()
	err := w.tenant.dyn.Resource(gvr).Namespace(ns).Delete(ctx, name, opts)
	took := time.Since(start)
	after := w.s.rules.view()
	a := classify(err)
	w.s.stats.deleted(what, a, took)
	obj := fmt.Sprintf("%s %s/%s/%s", procenv.Kinds[gvr.Resource], w.tenant.name, ns, name)
	settled := counts(before, after, gvr)
	want := before.protects(gvr)
	dry := len(opts.DryRun) > 0
	switch {
	case a == answerError:
		w.s.stats.failed("delete "+what, err)
	case a == answerGone:
		w.s.stats.failed("delete "+what, fmt.Errorf("%s is gone, but was not deleted by this test", obj))
	case a == answerAllowed && want != unprotected && settled:
		w.s.stats.wrongDecision("the DELETE of %s was allowed while a VM referenced it (rules %q)", obj, before.phase)
	case a == answerAllowed && want != unprotected:
		w.s.stats.uncountedDecision(fmt.Sprintf("%s allowed while referenced, during a rule change", what))
	case a.denied() && want == unprotected && settled:
		w.s.stats.wrongDecision("the DELETE of %s was denied, but no rule protects it (rules %q): %v", obj, before.phase, err)
	case a.denied() && want == unprotected:
		w.s.stats.uncountedDecision(fmt.Sprintf("%s denied though unprotected, during a rule change", what))
	case a == answerDeferred && want == denying && settled:
		w.s.stats.wrongDecision("the DELETE of %s was deferred under a Deny rule (rules %q): %v", obj, before.phase, err)
	case a == answerDenied && want == deferring && !dry && settled:
		// Denied but not recorded: the record failed ("could not be
		// deferred"); protection held, so it is not a wrong decision.
		w.s.stats.uncountedDecision(fmt.Sprintf("%s denied but not deferred under Replay", what))
	}
	return a
}

// deleteUnreferenced deletes an object that nothing references any more;
// it must be allowed (or already gone, replayed) within stuckAfter.
func (w *worker) deleteUnreferenced(ctx context.Context, gvr schema.GroupVersionResource, name string) {
	what := "unreferenced " + procenv.Kinds[gvr.Resource]
	deadline := time.Now().Add(stuckAfter)
	delay := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		start := time.Now()
		err := w.resource(gvr).Delete(ctx, name, metav1.DeleteOptions{})
		a := classify(err)
		w.s.stats.deleted(what, a, time.Since(start))
		switch a {
		case answerAllowed, answerGone:
			if attempt > 0 {
				w.s.stats.add("unreferenced deletes denied at first (index behind)")
			}
			return
		case answerError:
			w.s.stats.failed("delete "+what, err)
		}
		if time.Now().After(deadline) {
			w.s.stats.wrongDecision("%s was still not deletable %s after its last reference went: %v", w.where(gvr, name), stuckAfter, err)
			return
		}
		time.Sleep(delay)
		delay = min(2*delay, 2*time.Second)
	}
}

// mustExist checks that a target that vm has referenced since the view
// since still exists: neither a wrongly allowed DELETE nor a replay took
// it.
func (w *worker) mustExist(ctx context.Context, gvr schema.GroupVersionResource, name string, since view, vm string) {
	_, err := w.resource(gvr).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
	case !apierrors.IsNotFound(err):
		w.s.stats.failed("get "+procenv.Kinds[gvr.Resource], err)
	case since.protects(gvr) != unprotected && counts(since, w.s.rules.view(), gvr):
		w.s.stats.wrongDecision("%s is gone while VM %s references it (rules %q)", w.where(gvr, name), vm, since.phase)
	case since.protects(gvr) != unprotected:
		w.s.stats.uncountedDecision(fmt.Sprintf("referenced %s gone, during a rule change", procenv.Kinds[gvr.Resource]))
	}
}

// check sends dry-run DELETEs of the base population's VPCs and Subnets,
// each referenced by a VM, until the soak stops.
func (w *worker) check(ctx context.Context) {
	if w.s.cfg.base == 0 {
		return
	}
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(len(w.tenant.name))))
	for !w.s.stopping() {
		i := rnd.IntN(w.s.cfg.base)
		w.deleteReferenced(ctx, vpcs, "base", baseName("vpc", i), dryRun, "base VPC (dry run)")
		w.deleteReferenced(ctx, subnets, "base", baseName("subnet", i), dryRun, "base Subnet (dry run)")
		time.Sleep(100 * time.Millisecond)
	}
}
