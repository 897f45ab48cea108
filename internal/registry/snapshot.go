package registry

import (
	"cmp"
	"slices"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

// snapshot is an immutable view for readers.
type snapshot struct {
	byTarget map[Target][]Entry
	// guards are keyed by the workspace that serves the dependent (the
	// rule's) and the dependent resource.
	guards map[Target][]Guard
	// guardOf is the guard of each rule.
	guardOf map[kcp.ObjectKey]Guard
	// protections are the protected resources, sorted by target.
	protections []Protection
	// labelling is keyed like guards.
	labelling map[Target]Labelling
	rules     int
}

// publish rebuilds the read snapshot and tells the index which sources to
// watch (dependents, with the paths to read) and to read (targets, with no
// paths). Callers hold the lock.
func (r *Registry) publish() {
	b := newBuilder(r.workspaces)
	for _, rec := range r.records {
		b.add(rec.rule)
	}
	s, sources := b.build()
	r.current.Store(s)
	select {
	case r.changed <- struct{}{}:
	default:
	}
	if r.sources != nil {
		r.sources(sources)
	}
}

// builder builds a snapshot from the registered rules, one rule at a time,
// and the sources of the index.
type builder struct {
	// workspaces maps workspace paths to logical clusters (see
	// Registry.workspaces).
	workspaces map[string]logicalcluster.Name
	s          *snapshot
	// sources are the dependent sources with the paths to read of each,
	// targets the protected resources as their providers serve them.
	sources map[index.Source][]fieldpath.Reference
	targets []index.Source
	// rulesOf are the rules of each dependent type, by the workspace that
	// serves it and its resource.
	rulesOf     map[Target][]*Rule
	protections map[Target]*Protection
}

func newBuilder(workspaces map[string]logicalcluster.Name) *builder {
	return &builder{
		workspaces:  workspaces,
		s:           &snapshot{byTarget: map[Target][]Entry{}, guards: map[Target][]Guard{}, guardOf: map[kcp.ObjectKey]Guard{}},
		sources:     map[index.Source][]fieldpath.Reference{},
		rulesOf:     map[Target][]*Rule{},
		protections: map[Target]*Protection{},
	}
}

// add adds a rule: an entry for each target it protects in a workspace that
// binds the dependencies APIExport, its guard, its dependent source, and the
// targets it protects.
func (b *builder) add(rule *Rule) {
	b.s.rules++
	byTarget := map[Target]*Entry{}
	guard := Guard{Rule: rule.Key, Dependent: rule.Dependent, Tracking: rule.Tracking}
	for _, ref := range rule.References {
		b.sources[rule.Dependent] = append(b.sources[rule.Dependent], ref.Path)
		cluster, ok := b.workspaces[ref.Workspace.String()]
		if !ok {
			// Not bound (yet): kcp calls no webhook for it, and its
			// objects cannot be read.
			guard.References = append(guard.References, GuardReference{Path: ref.Path})
			continue
		}
		targetSource := index.Source{
			Export:   kcp.ObjectKey{Cluster: cluster, Name: ref.Export},
			Resource: ref.Target.WithVersion(ref.Version),
		}
		b.targets = append(b.targets, targetSource)
		guard.References = append(guard.References, GuardReference{Path: ref.Path, Target: targetSource})
		target := Target{Cluster: cluster, Resource: ref.Target}
		e, ok := byTarget[target]
		if !ok {
			e = &Entry{Rule: rule.Key, Dependent: rule.Dependent, DependentKind: rule.DependentKind, Target: targetSource, Replay: rule.Replay, Tracking: rule.Tracking}
			byTarget[target] = e
		}
		e.Paths = append(e.Paths, ref.Path)
		b.protect(target, targetSource, rule.Replay)
	}
	for target, e := range byTarget {
		e.Paths = sortPaths(e.Paths)
		b.s.byTarget[target] = append(b.s.byTarget[target], *e)
	}
	dependent := Target{Cluster: rule.Key.Cluster, Resource: rule.Dependent.Resource.GroupResource()}
	b.s.guards[dependent] = append(b.s.guards[dependent], guard)
	b.s.guardOf[rule.Key] = guard
	b.rulesOf[dependent] = append(b.rulesOf[dependent], rule)
}

// protect records that a rule protects target, whose objects are read as
// src, deferring deletions if replay. Of the sources of the rules that
// protect a target, the first in order is read.
func (b *builder) protect(target Target, src index.Source, replay bool) {
	p, ok := b.protections[target]
	if !ok {
		p = &Protection{Target: target, Source: src}
		b.protections[target] = p
	}
	p.Replay = p.Replay || replay
	if compareSources(src, p.Source) < 0 {
		p.Source = src
	}
}

// build returns the snapshot of the rules added, sorted, and the sources
// the index is to watch (dependents, with their sorted paths) and to read
// (targets that are not dependents as well, with no paths).
func (b *builder) build() (*snapshot, map[index.Source][]fieldpath.Reference) {
	s := b.s
	for _, entries := range s.byTarget {
		slices.SortFunc(entries, func(a, b Entry) int { return a.Rule.Compare(b.Rule) })
	}
	for _, guards := range s.guards {
		slices.SortFunc(guards, func(a, b Guard) int { return a.Rule.Compare(b.Rule) })
	}
	for _, p := range b.protections {
		s.protections = append(s.protections, *p)
	}
	slices.SortFunc(s.protections, func(a, b Protection) int {
		return cmp.Or(cmp.Compare(a.Target.Cluster, b.Target.Cluster), cmp.Compare(a.Target.Resource.Group, b.Target.Resource.Group), cmp.Compare(a.Target.Resource.Resource, b.Target.Resource.Resource))
	})
	s.labelling = make(map[Target]Labelling, len(b.rulesOf))
	for dependent, rules := range b.rulesOf {
		s.labelling[dependent] = labellingOf(rules)
	}
	// Targets are read, not watched: no paths, unless the same source is
	// also a dependent.
	for _, t := range b.targets {
		if _, ok := b.sources[t]; !ok {
			b.sources[t] = nil
		}
	}
	for src, paths := range b.sources {
		b.sources[src] = sortPaths(paths)
	}
	return s, b.sources
}

// labellingOf returns how the dependents of the type of rules (all rules
// that name one dependent resource in one workspace) are labelled.
func labellingOf(rules []*Rule) Labelling {
	slices.SortFunc(rules, func(a, b *Rule) int { return a.Key.Compare(b.Key) })
	l := Labelling{Dependent: rules[0].Dependent, Labelled: true}
	covered := make([]reflabels.Rule, 0, len(rules))
	for _, rule := range rules {
		l.Rules = append(l.Rules, rule.Key)
		l.Labelled = l.Labelled && rule.Labelled
		r := reflabels.Rule{Name: rule.Key.String(), UID: rule.UID, Dependent: rule.Dependent.String()}
		for _, ref := range rule.References {
			r.References = append(r.References, reflabels.Reference{Path: ref.Path, Target: ref.Target})
		}
		covered = append(covered, r)
	}
	l.Scheme, l.Reason = reflabels.SchemeOf(covered)
	l.Labellable = l.Reason == ""
	if !l.Labellable {
		l.Dependent, l.Labelled = index.Source{}, false
	}
	return l
}

// compareSources orders sources by export, then resource.
func compareSources(a, b index.Source) int {
	return cmp.Or(a.Export.Compare(b.Export), cmp.Compare(a.Resource.Group, b.Resource.Group),
		cmp.Compare(a.Resource.Resource, b.Resource.Resource), cmp.Compare(a.Resource.Version, b.Resource.Version))
}

// sortPaths sorts paths and drops duplicates.
func sortPaths(paths []fieldpath.Reference) []fieldpath.Reference {
	slices.SortFunc(paths, func(a, b fieldpath.Reference) int { return cmp.Compare(a.String(), b.String()) })
	return slices.Compact(paths)
}
