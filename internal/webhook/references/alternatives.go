package references

import (
	"context"
	"sync/atomic"
)

// alternatives are the references of one write that name one object (a
// namespace and a name of one resource) under two or more exports: the
// rules of two providers of one resource on one field. A workspace binds at
// most one of those exports (kcp does not bind an export whose resources
// another binding serves), so once the object is found under one, the
// others name nothing, and their reads and writes, which wait for a
// workspace that does not bind the export to settle (see
// objects.Client.Settled), are cut short, and their errors do not count.
type alternatives struct {
	// of is the group of each reference; nil for one without alternatives.
	of []*alternativeGroup
	// errs are the errors of the references with alternatives, kept
	// until all have returned (see do and firstError).
	errs []error
}

// alternativeGroup is one object's references under several exports.
type alternativeGroup struct {
	// found is set once the object was found under one of them.
	found atomic.Bool
	// ctx ends once it is found (or the request ends).
	ctx    context.Context
	cancel context.CancelFunc
}

// alternativesOf groups the references of added; the groups' contexts
// derive from ctx, and release ends them.
func alternativesOf(ctx context.Context, added []reference) (a alternatives, release func()) {
	if len(added) < 2 {
		// The common case, without allocations.
		return a, func() {}
	}
	count := map[object]int{}
	for _, r := range added {
		count[r.object()]++
	}
	groups := map[object]*alternativeGroup{}
	for i, r := range added {
		k := r.object()
		if count[k] < 2 {
			continue
		}
		if a.of == nil {
			a.of = make([]*alternativeGroup, len(added))
			a.errs = make([]error, len(added))
		}
		g := groups[k]
		if g == nil {
			g = &alternativeGroup{}
			g.ctx, g.cancel = context.WithCancel(ctx)
			groups[k] = g
		}
		a.of[i] = g
	}
	return a, func() {
		for _, g := range groups {
			g.cancel()
		}
	}
}

// group returns the group of the reference i, or nil.
func (a alternatives) group(i int) *alternativeGroup {
	if a.of == nil {
		return nil
	}
	return a.of[i]
}

// resolved reports whether the object of g was found under one of its
// exports.
func (g *alternativeGroup) resolved() bool { return g.found.Load() }

// resolve records that the object of g was found, and cuts the others
// short.
func (g *alternativeGroup) resolve() {
	g.found.Store(true)
	g.cancel()
}

// run calls fn with a context that also ends once g is resolved, and
// resolves g if fn reports that it found the object. It returns fn's error,
// and whether g was resolved by another reference before fn found anything:
// then fn's outcome is to be taken for "names nothing", and its error is
// nil.
func (g *alternativeGroup) run(ctx context.Context, fn func(ctx context.Context) (found bool, err error)) (cut bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(g.ctx, cancel)
	defer stop()
	found, err := fn(ctx)
	switch {
	case found && err == nil:
		g.resolve()
	case g.resolved():
		return true, nil
	}
	return false, err
}

// do calls fn, which reports whether the reference i found its object: at
// once for a reference without alternatives, returning its error; within
// its group for one with (see alternativeGroup.run), keeping its error for
// firstError, since it counts only if no alternative found the object. It
// reports whether i was cut short: fn's outcome is then to be taken for
// "names nothing".
func (a alternatives) do(ctx context.Context, i int, fn func(ctx context.Context) (found bool, err error)) (cut bool, err error) {
	g := a.group(i)
	if g == nil {
		_, err := fn(ctx)
		return false, err
	}
	cut, a.errs[i] = g.run(ctx, fn)
	return cut, nil
}

// firstError returns the first error that do kept (by reference) that
// counts, that of a reference whose object was found under none of its
// exports, and its index; -1 and nil if none does. Call it once every do
// has returned.
func (a alternatives) firstError() (int, error) {
	for i, err := range a.errs {
		if err != nil && !a.group(i).resolved() {
			return i, err
		}
	}
	return -1, nil
}
