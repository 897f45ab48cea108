// Package relabel has the dependents that are not labelled with what they
// reference under the current rules (see package reflabels) labelled: those
// that existed before their rules, or were written while the webhook had
// other rules. It does not write the labels itself: it changes the scheme
// label of each such dependent to a throwaway value, a write that kcp
// passes through the labelling webhook, which computes the labels from the
// object. So labels come only from admission, and where the labelling
// webhook is not installed the dependent stays unlabelled (and is read in
// full), never labelled by someone who cannot vouch for later writes.
//
// It reports, per rule, the DependentsLabelled condition, under a field
// manager of its own. It runs on the webhook's elected replica.
package relabel

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/buger/jsonparser"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

// Rules are the labelling schemes of the registered rules;
// *registry.Registry implements it.
type Rules interface {
	Labellings() map[registry.Target]registry.Labelling
	Changes() <-chan struct{}
}

// Objects lists and patches dependents through their provider's virtual
// workspace; *objects.Client implements it.
type Objects interface {
	List(ctx context.Context, src index.Source, labelSelector string, visit func(kcp.Meta) error) error
	Patch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) ([]byte, error)
}

// ConditionWriter writes the DependentsLabelled condition of a rule, if it
// differs from what the rule has.
type ConditionWriter func(ctx context.Context, rule kcp.ObjectKey, condition func(generation int64) metav1.Condition) error

// Options configure a Relabeller.
type Options struct {
	// Interval is how often every type is looked at again without a change
	// of the rules. Default 30s.
	Interval time.Duration
	// Workers is how many dependents are relabelled at once. Default 8.
	Workers int
	// Timeout bounds the listing and the relabelling of one type. Default
	// 5m.
	Timeout time.Duration
	// OnUnlabelled, if set, is called after every pass over a type with the
	// number of its dependents that are not labelled under its scheme.
	OnUnlabelled func(dependent registry.Target, n int)
}

// Relabeller has unlabelled dependents labelled. It is a
// manager.LeaderElectionRunnable that runs on the elected replica.
type Relabeller struct {
	rules   Rules
	objects Objects
	write   ConditionWriter
	opts    Options
	now     func() time.Time
}

// New returns a Relabeller of the dependents of rules, which it lists and
// writes with objs, reporting on the rules with write.
func New(rules Rules, objs Objects, write ConditionWriter, opts Options) *Relabeller {
	if opts.Interval <= 0 {
		opts.Interval = 30 * time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Minute
	}
	return &Relabeller{rules: rules, objects: objs, write: write, opts: opts, now: time.Now}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (r *Relabeller) NeedLeaderElection() bool {
	return true
}

// debounce is how long the Relabeller waits after a change of the rules,
// so that a burst of changes makes one pass.
const debounce = time.Second

// Start implements manager.Runnable.
func (r *Relabeller) Start(ctx context.Context) error {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithName("relabel"))
	ticker := time.NewTicker(r.opts.Interval)
	defer ticker.Stop()
	for {
		r.pass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-r.rules.Changes():
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(debounce):
			}
		}
	}
}

// pass looks at every dependent type once.
func (r *Relabeller) pass(ctx context.Context) {
	labellings := r.rules.Labellings()
	targets := make([]registry.Target, 0, len(labellings))
	for t := range labellings {
		targets = append(targets, t)
	}
	slices.SortFunc(targets, func(a, b registry.Target) int {
		return strings.Compare(string(a.Cluster)+"/"+a.Resource.String(), string(b.Cluster)+"/"+b.Resource.String())
	})
	for _, t := range targets {
		if ctx.Err() != nil {
			return
		}
		l := labellings[t]
		condition := r.relabel(ctx, t, l)
		for _, rule := range l.Rules {
			if err := r.write(ctx, rule, condition); err != nil && !apierrors.IsNotFound(err) {
				log.FromContext(ctx).V(1).Info("Failed to report the labelling of a rule's dependents", "rule", rule, "error", err.Error())
			}
		}
	}
}

// relabel has the dependents of one type that are not labelled under its
// scheme relabelled, and returns the condition that describes the outcome.
func (r *Relabeller) relabel(ctx context.Context, t registry.Target, l registry.Labelling) func(int64) metav1.Condition {
	condition := func(status metav1.ConditionStatus, reason, msg string) func(int64) metav1.Condition {
		return func(generation int64) metav1.Condition {
			return metav1.Condition{Type: depv1alpha1.ConditionDependentsLabelled, Status: status, Reason: reason, Message: msg, ObservedGeneration: generation}
		}
	}
	if !l.Labellable {
		return condition(metav1.ConditionFalse, depv1alpha1.ReasonNotLabellable,
			fmt.Sprintf("Dependents are not labelled with what they reference: %s; every allowed delete reads all dependents in scope", l.Reason))
	}
	logger := log.FromContext(ctx).WithValues("dependent", l.Dependent, "scheme", l.Scheme.Fingerprint)
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	var stale []kcp.Meta
	if err := r.objects.List(ctx, l.Dependent, reflabels.UnlabelledSelector(l.Scheme.Fingerprint), func(m kcp.Meta) error {
		if !m.Terminating {
			stale = append(stale, m)
		}
		return nil
	}); err != nil {
		logger.V(1).Info("Cannot list the unlabelled dependents", "error", err.Error())
		return condition(metav1.ConditionUnknown, depv1alpha1.ReasonLabelling,
			fmt.Sprintf("Cannot list the dependents that are not labelled yet (%v); until they are, allowed deletes read them too", err))
	}
	labelled, vouched, denied := r.trigger(ctx, l, stale)
	left := len(stale) - labelled
	if r.opts.OnUnlabelled != nil {
		r.opts.OnUnlabelled(t, left)
	}
	if left > 0 {
		logger.V(1).Info("Relabelled dependents", "labelled", labelled, "left", left)
	}
	switch {
	case left == 0:
		return condition(metav1.ConditionTrue, depv1alpha1.ReasonLabelled,
			"Every dependent carries the reference labels of the current rules: allowed deletes read only the dependents that may reference the object")
	case denied > 0:
		return condition(metav1.ConditionFalse, depv1alpha1.ReasonAccessDenied, fmt.Sprintf(
			"%d dependents that existed before the rules are not labelled: the provider has not granted the webhook patch on apiexports/content of %q (see webhook-access.yaml in config/samples); they are labelled when next written, and read by every allowed delete until then",
			left, l.Dependent.Export.Name))
	case vouched == 0 && labelled == 0:
		return condition(metav1.ConditionUnknown, depv1alpha1.ReasonLabelling, fmt.Sprintf(
			"%d dependents are not labelled yet: waiting for the labelling webhook of these rules to be installed; allowed deletes read them in full meanwhile", left))
	default:
		return condition(metav1.ConditionUnknown, depv1alpha1.ReasonLabelling, fmt.Sprintf(
			"%d dependents are not labelled under the current rules yet; allowed deletes read them in full meanwhile", left))
	}
}

// relabelPrefix starts the throwaway value of the scheme label that has a
// dependent relabelled: a new one every pass, so that the write changes
// the labels and kcp calls the labelling webhook.
const relabelPrefix = "relabel-"

// trigger writes a throwaway value to the scheme label of each dependent,
// which kcp passes through the labelling webhook, and returns how many came
// back labelled under l's scheme, how many came back with any managed label
// at all (the labelling webhook ran), and how many writes were refused. The
// first dependent goes alone: if the labelling webhook did not run for it
// (not installed yet) or the write was refused, the others are left for
// the next pass, so that a missing webhook or grant costs one write per
// pass, not one per dependent.
func (r *Relabeller) trigger(ctx context.Context, l registry.Labelling, stale []kcp.Meta) (labelled, vouched, denied int) {
	if len(stale) == 0 {
		return 0, 0, 0
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{
		depv1alpha1.LabelReferencesScheme: relabelPrefix + strconv.FormatInt(r.now().UnixNano(), 36),
	}}})
	var lock sync.Mutex
	one := func(m kcp.Meta) {
		patched, err := r.objects.Patch(ctx, l.Dependent, m.Cluster, m.Namespace, m.Name, types.MergePatchType, body)
		lock.Lock()
		defer lock.Unlock()
		switch {
		case err == nil:
			scheme, _ := jsonparser.GetString(patched, "metadata", "labels", depv1alpha1.LabelReferencesScheme)
			if reflabels.LabelledUnder(scheme, l.Scheme.Fingerprint) {
				labelled++
			}
			if scheme != "" && !strings.HasPrefix(scheme, relabelPrefix) {
				vouched++
			}
		case apierrors.IsNotFound(err):
			labelled++ // gone
		case apierrors.IsForbidden(err):
			denied++
		}
	}
	one(stale[0])
	if labelled == 0 && vouched == 0 {
		return labelled, vouched, denied
	}
	var (
		wg   sync.WaitGroup
		next = make(chan kcp.Meta)
	)
	for range r.opts.Workers {
		wg.Go(func() {
			for m := range next {
				one(m)
			}
		})
	}
feed:
	for _, m := range stale[1:] {
		select {
		case next <- m:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return labelled, vouched, denied
}
