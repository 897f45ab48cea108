package audit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

// Rules are the registered rules; *registry.Registry implements it.
type Rules interface {
	Rules() []*registry.Rule
	GuardOf(key kcp.ObjectKey) (registry.Guard, bool)
}

// Index is what the audit reads of the webhook's index; *index.Index
// implements it.
type Index interface {
	// State returns what the index knows about a source.
	State(src index.Source) index.State
	// Holders calls fn with every indexed dependent of src that holds a
	// reference and is not being deleted; false if src is not indexed.
	Holders(src index.Source, fn func(paths []fieldpath.Reference, h *index.Holder)) bool
	// Existing tells whether objects of src exist, and whether it knows
	// every object of src.
	Existing(src index.Source) (index.Existence, bool)
	// WatchTargets turns the watches of protected types on or off.
	WatchTargets(on bool)
	// Contents receives a value whenever dependents or targets may have
	// changed.
	Contents() <-chan struct{}
}

// targetType is a protected type as one provider serves it, in any
// version: the same objects whatever version a rule names.
type targetType struct {
	export   kcp.ObjectKey
	resource schema.GroupResource
}

// pair is a dependent type and a protected type it references.
type pair struct {
	dependent index.Source
	target    targetType
}

// refKey identifies one reference: a dependent (its type, workspace,
// namespace, name and UID, so that a dependent deleted and created again
// is another one) and the object it names. A reference the dependent holds
// at several paths, or under several rules, is one.
type refKey struct {
	dependent       index.Source
	cluster         logicalcluster.Name
	namespace, name string
	uid             types.UID
	target          targetType
	// targetNamespace is the namespace of the object named, empty for a
	// cluster-scoped type; anyNamespace is set for the reference of a
	// cluster-scoped dependent that names no namespace, which names an
	// object of that name in any namespace.
	targetNamespace, targetName string
	anyNamespace                bool
}

// finding is a reference to an object that does not exist, and since when
// the audit has seen it missing.
type finding struct {
	key refKey
	// kind is the dependent's kind, meta its metadata (for the Event).
	kind string
	meta kcp.Meta
	// since is when the audit first saw the object missing, in a row.
	since time.Time
	// early is set for a finding of the first pass that could check its
	// pair since the Auditor started: the object may have been missing for
	// longer.
	early bool
	// rules are the rules under which the dependent holds the reference.
	rules []kcp.ObjectKey
	// evented is set once its Event was recorded (or cannot be).
	evented bool
	// rendered is its sample, once rendered.
	rendered string
	// confirmed is when a read last found the object missing (see
	// confirm).
	confirmed time.Time
}

// dependentString renders the dependent as Kind/namespace/name, or
// Kind/name if it is cluster-scoped.
func (f *finding) dependentString() string {
	if f.key.namespace == "" {
		return f.kind + "/" + f.key.name
	}
	return f.kind + "/" + f.key.namespace + "/" + f.key.name
}

// sample renders the reference for a condition: "VirtualMachine/default/vm-1
// -> vpcs default/vpc-a", "... -> routers core-router" for a
// cluster-scoped type, "... -> vpcs vpc-a in any namespace".
func (f *finding) sample() string {
	if f.rendered != "" {
		return f.rendered
	}
	target := f.key.targetName
	switch {
	case f.key.anyNamespace:
		target += " in any namespace"
	case f.key.targetNamespace != "":
		target = f.key.targetNamespace + "/" + target
	}
	f.rendered = fmt.Sprintf("%s -> %s %s", f.dependentString(), f.key.target.resource.Resource, target)
	return f.rendered
}

// message is the message of the Event on the dependent.
func (f *finding) message() string {
	where := ""
	switch {
	case f.key.anyNamespace:
		where = " in any namespace"
	case f.key.targetNamespace != "":
		where = fmt.Sprintf(" in namespace %q", f.key.targetNamespace)
	}
	return fmt.Sprintf("%s references %s %q%s, which does not exist", f.dependentString(), f.key.target.resource, f.key.targetName, where)
}

// check is one reference of a rule to check: where the rule's dependents
// hold it, and the protected type as the rule's guard reads it.
type check struct {
	rule   kcp.ObjectKey
	kind   string
	path   fieldpath.Reference
	target index.Source
	// exist tells whether its objects exist; namespaced whether the type
	// is namespaced.
	exist      index.Existence
	namespaced bool
}

// ruleStatus is what a pass learned about one rule besides its findings:
// whether any of its references could be checked, and why others could
// not.
type ruleStatus struct {
	rule *registry.Rule
	// checked is set when some reference of the rule was checked.
	checked bool
	// unknown says why references to some types could not be checked,
	// with the reason of the first; syncing is set when every one of them
	// is only not synced yet.
	unknown       []string
	unknownReason string
	syncing       bool
}

// cannot records why the references to a type cannot be checked.
func (s *ruleStatus) cannot(reason, why string) {
	if !slices.Contains(s.unknown, why) {
		s.unknown = append(s.unknown, why)
	}
	if s.unknownReason == "" {
		s.unknownReason, s.syncing = reason, true
	}
	if reason != depv1alpha1.ReasonSyncing {
		s.syncing = false
	}
}

// detection is the outcome of one pass's detection.
type detection struct {
	rules []*ruleStatus
	// sources are the dependent types the rules name.
	sources []index.Source
}

// describe names a type of an APIExport for messages.
func describe(src index.Source) string {
	return fmt.Sprintf("%s of the APIExport %s", src.Resource.GroupResource(), src.Export)
}

// dependentsKnown reports whether the index holds the dependents of a
// source in state, and if not, the reason and why.
func dependentsKnown(src index.Source, state index.State) (ok bool, reason, why string) {
	switch {
	case state.Phase == index.PhaseSynced, state.Phase == index.PhaseSyncing && state.Listed:
		// A broken watch lists again within seconds: the references
		// indexed until then are as good as any.
		return true, "", ""
	case state.Phase == index.PhaseSyncing:
		return false, depv1alpha1.ReasonSyncing, "the dependents (" + describe(src) + ") are not indexed yet"
	default:
		return false, string(state.Phase), "the dependents (" + describe(src) + ") are not indexed: see DependentsIndexed"
	}
}

// targetsKnown reports whether the audit knows every object of a protected
// type in state (known), and if not, the reason and why.
func targetsKnown(src index.Source, state index.State, known bool) (reason, why string) {
	if known {
		return "", ""
	}
	switch state.Phase {
	case index.PhaseSyncing, index.PhaseSynced:
		return depv1alpha1.ReasonSyncing, "the webhook is listing " + describe(src)
	default:
		return string(state.Phase), fmt.Sprintf("the webhook cannot watch %s (see ReferencesGuarded): %s", describe(src), state.Message)
	}
}

// detect checks every reference of every rule against the objects that
// exist, and updates a.findings: a reference found missing keeps the time
// it was first found so, one found resolved is dropped, and one whose
// pair could not be checked in this pass is kept as it was.
func (a *Auditor) detect(ctx context.Context, now time.Time) detection {
	var out detection
	bySource := map[index.Source][]*check{}
	statusOf := map[kcp.ObjectKey]*ruleStatus{}
	for _, r := range a.rules.Rules() {
		rs := &ruleStatus{rule: r}
		out.rules = append(out.rules, rs)
		statusOf[r.Key] = rs
		g, ok := a.rules.GuardOf(r.Key)
		if !ok {
			rs.cannot(depv1alpha1.ReasonSyncing, "the rule is not registered yet")
			continue
		}
		if _, ok := bySource[r.Dependent]; !ok {
			out.sources = append(out.sources, r.Dependent)
		}
		for _, ref := range g.References {
			if ref.Target.Export.Name == "" {
				continue // the protected workspace does not bind the dependencies APIExport
			}
			bySource[r.Dependent] = append(bySource[r.Dependent], &check{rule: r.Key, kind: r.DependentKind, path: ref.Path, target: ref.Target})
		}
	}

	present, checked := map[pair]bool{}, map[pair]bool{}
	found, missing := map[refKey]*finding{}, map[targetObject]*suspect{}
	for src, checks := range bySource {
		depState := a.ix.State(src)
		depOK, depReason, depWhy := dependentsKnown(src, depState)
		var ready []*check
		for _, c := range checks {
			p := pair{dependent: src, target: targetType{export: c.target.Export, resource: c.target.Resource.GroupResource()}}
			present[p] = true
			if !depOK {
				statusOf[c.rule].cannot(depReason, depWhy)
				continue
			}
			exist, known := a.ix.Existing(c.target)
			state := a.ix.State(c.target)
			if reason, why := targetsKnown(c.target, state, known); reason != "" {
				statusOf[c.rule].cannot(reason, why)
				continue
			}
			c.exist, c.namespaced = exist, state.Namespaced
			ready = append(ready, c)
		}
		if len(ready) == 0 {
			continue
		}
		a.checkSource(src, ready, missing)
		for _, c := range ready {
			checked[pair{dependent: src, target: targetType{export: c.target.Export, resource: c.target.Resource.GroupResource()}}] = true
			statusOf[c.rule].checked = true
		}
	}
	a.confirm(ctx, missing, found, now)
	for k, f := range a.findings {
		if _, ok := found[k]; ok {
			continue
		}
		if p := (pair{dependent: k.dependent, target: k.target}); present[p] && !checked[p] {
			found[k] = f // not checked in this pass: as it was
		}
	}
	for p := range checked {
		a.checkedOnce[p] = true
	}
	a.findings = found
	return out
}

// checkSource checks the references of the indexed dependents of src at
// the paths of checks, adding those to objects missing from their set of
// targets to missing.
func (a *Auditor) checkSource(src index.Source, checks []*check, missing map[targetObject]*suspect) {
	var byPath [][]*check
	a.ix.Holders(src, func(paths []fieldpath.Reference, h *index.Holder) {
		if byPath == nil {
			byPath = make([][]*check, len(paths))
			for _, c := range checks {
				if i := slices.Index(paths, c.path); i >= 0 {
					byPath[i] = append(byPath[i], c)
				}
			}
		}
		for _, r := range h.Refs() {
			if r.Name == "" || r.Path >= len(byPath) {
				continue
			}
			for _, c := range byPath[r.Path] {
				k, exists := c.lookup(h, r)
				if exists || len(byPath[r.Path]) > 1 && foundElsewhere(byPath[r.Path], c, h, r) {
					continue
				}
				k.dependent = src
				meta := h.Meta()
				k.uid = meta.UID
				suspectOf(missing, k, c, meta)
			}
		}
	})
}

// foundElsewhere reports whether the reference r of h, which names no
// object under c, names one under another of checks (the rules of one
// field) whose protected type is the same resource of another export: kcp
// binds no two exports of one resource in a workspace, so there the rule of
// c does not apply, and the reference is not dangling.
func foundElsewhere(checks []*check, c *check, h *index.Holder, r index.Held) bool {
	for _, o := range checks {
		if o != c && o.target.Resource.GroupResource() == c.target.Resource.GroupResource() && o.target.Export != c.target.Export {
			if _, exists := o.lookup(h, r); exists {
				return true
			}
		}
	}
	return false
}

// lookup resolves the reference r of h under c (see fieldpath.RefersTo:
// a reference names an object in its namespace, or the dependent's; a
// cluster-scoped dependent's reference without one, an object of that
// name in any namespace; a cluster-scoped type is named from anywhere)
// and reports whether the object exists. The key it returns lacks the
// dependent's type and UID.
func (c *check) lookup(h *index.Holder, r index.Held) (refKey, bool) {
	k := refKey{cluster: h.Cluster(), namespace: h.Namespace(), name: h.Name(), target: targetType{export: c.target.Export, resource: c.target.Resource.GroupResource()}, targetName: r.Name}
	switch {
	case !c.namespaced:
		return k, c.exist.Has(k.cluster, "", r.Name)
	case r.Namespace != "":
		k.targetNamespace = r.Namespace
	default:
		k.targetNamespace = k.namespace
	}
	if k.targetNamespace == "" {
		k.anyNamespace = true
		return k, c.exist.Named(k.cluster, r.Name)
	}
	return k, c.exist.Has(k.cluster, k.targetNamespace, r.Name)
}

// found records in found that the reference k, which the dependent with
// metadata meta holds under the rule of c, names no object: as a.findings
// had it, or new since now. It returns the finding.
func (a *Auditor) found(found map[refKey]*finding, k refKey, c *check, meta kcp.Meta, now time.Time) *finding {
	f, ok := found[k]
	if !ok {
		if prev, seen := a.findings[k]; seen {
			f = prev
		} else {
			f = &finding{key: k, kind: c.kind, meta: meta, since: now, early: !a.checkedOnce[pair{dependent: k.dependent, target: k.target}]}
		}
		f.rules = f.rules[:0]
		found[k] = f
	}
	if !slices.Contains(f.rules, c.rule) {
		f.rules = append(f.rules, c.rule)
	}
	return f
}

// samples renders at most n of findings, sorted, and how many more there
// are.
func samples(findings []*finding, n int) string {
	all := make([]string, 0, len(findings))
	for _, f := range findings {
		all = append(all, f.sample())
	}
	slices.Sort(all)
	if len(all) <= n {
		return strings.Join(all, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(all[:n], ", "), len(all)-n)
}
