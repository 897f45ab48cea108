// Package sources keeps the dependents of one dependent type (a Source)
// current in a store: a Watch follows the APIExportEndpointSlice of the
// type's APIExport (shards added and removed), checks what the export serves
// and whether the webhook may read it, checks the rules' field paths against
// the type's schema, and runs one reflector per shard that lists and watches
// the dependents through that shard's virtual workspace, decoding of each
// only its metadata and the strings at the paths. A protected type that is
// no dependent type is only inspected, and, for the audit of dangling
// references, its objects are watched the same way into a set of targets
// (Watch.SetWatchTargets): those not labelled cleared (TargetsSelector).
//
// A state that would take protection away (access revoked, export or
// resource gone, a shard dropped) applies only once several inspections in
// a row agree, so that a kcp shard that is restarting never switches
// protection off.
package sources

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// TargetsSelector selects the objects that a set of targets holds: those
// not labelled cleared (api/v1alpha1.LabelCleared). An object that nothing
// references is cleared and so labelled, and kcp deletes it without
// calling the webhook; selected by this label, the watch of targets leaves
// out its deletion too, which kcp would otherwise decode and encode for
// the webhook, one event per object. An object comes back with a reference
// recorded on it, which removes the label. Only the webhook sets the label
// now, but earlier releases let anyone set it, so a reference to an object
// missing from the set is read before the audit takes it to be dangling
// (see package audit).
const TargetsSelector = "!" + depv1alpha1.LabelCleared

// Source identifies one dependent (or protected) type as its provider serves
// it: the APIExport (in the workspace of the rules that name it) and the
// resource. Its objects are read only through that APIExport's virtual
// workspace, with the access its provider granted.
type Source struct {
	// Export is the logical cluster and name of the APIExport.
	Export kcp.ObjectKey
	// Resource is the resource, in the version the rules name.
	Resource schema.GroupVersionResource
}

// String renders the source for messages, e.g.
// "virtualmachines.compute.example.io/v1 of APIExport 2x7c/compute.example.io".
func (s Source) String() string {
	return fmt.Sprintf("%s.%s/%s of APIExport %s", s.Resource.Resource, s.Resource.Group, s.Resource.Version, s.Export)
}

// Phase is where the index stands with a source.
type Phase string

// Phases of a source. Syncing and Synced sources take part in decisions;
// the others are problems of the rules that name the source, reported in
// their status.
const (
	// PhaseSyncing: the dependents are being listed for the first time on
	// some shard; decisions confirm every miss with a live read.
	PhaseSyncing Phase = "Syncing"
	// PhaseSynced: the dependents of every shard are indexed.
	PhaseSynced Phase = "Synced"
	// PhaseExportNotFound: the rules' workspace has no such APIExport. Rules
	// naming it have no effect.
	PhaseExportNotFound Phase = "ExportNotFound"
	// PhaseAccessDenied: the provider has not granted the webhook read
	// access to the APIExport. Rules naming it have no effect.
	PhaseAccessDenied Phase = "AccessDenied"
	// PhaseResourceNotExported: the APIExport does not serve the resource
	// in any version. Rules naming it have no effect.
	PhaseResourceNotExported Phase = "ResourceNotExported"
	// PhaseVersionNotServed: the APIExport serves the resource, but not in
	// the version the rules name. Deletes that such a rule protects are
	// refused in workspaces that bind the export, since they cannot be
	// checked.
	PhaseVersionNotServed Phase = "VersionNotServed"
)

// Phases are all phases of a source.
var Phases = []Phase{PhaseSyncing, PhaseSynced, PhaseExportNotFound, PhaseAccessDenied, PhaseResourceNotExported, PhaseVersionNotServed}

// Effective reports whether rules naming a source in this phase take part
// in decisions.
func (p Phase) Effective() bool {
	return p == PhaseSyncing || p == PhaseSynced || p == PhaseVersionNotServed
}

// State is what the index knows about a source.
type State struct {
	// Phase is where the index stands with the source.
	Phase Phase
	// Message explains the phase, naming what to fix if anything.
	Message string
	// Namespaced tells whether the resource is namespaced; valid once the
	// APIExport has been read.
	Namespaced bool
	// Kind is the kind of the resource, as its provider serves it.
	Kind string
	// Shards is the number of shards the APIExport is served on.
	Shards int
	// PathProblems are the paths to read that can never hold a name in the
	// schema of the resource, as its APIExport serves it.
	PathProblems []PathProblem
	// Listed is set once the source has been listed on every shard. It
	// stays set while a broken watch makes the phase Syncing again: the
	// index is then incomplete, but was complete once.
	Listed bool
}

// Equal reports whether two states are the same.
func (s State) Equal(o State) bool {
	return s.Phase == o.Phase && s.Message == o.Message && s.Namespaced == o.Namespaced && s.Kind == o.Kind &&
		s.Shards == o.Shards && slices.Equal(s.PathProblems, o.PathProblems) && s.Listed == o.Listed
}

// PathProblem is a field path that can never hold a name in the schema of
// the dependent type, and why.
type PathProblem struct {
	// Path is the field path.
	Path fieldpath.Path
	// Problem says where the path leaves the schema.
	Problem string
}

// Status is the state of one watched source, the number of its dependents
// in the index and how current they are.
type Status struct {
	Source Source
	State  State
	// Indexed is the number of its dependents in the index; 0 for a source
	// that is only inspected (no rule reads paths of it).
	Indexed int
	// Targets is the number of its objects in its set of targets (see
	// index.Index.WatchTargets); 0 for an indexed source, or while targets
	// are not watched.
	Targets int
	// Currency is the currency (see index.Index.Currency) of its least
	// current shard, zero if that of some shard is not known;
	// CurrencyShards is the number of shards it was taken over: none for a
	// source that is only inspected, neither Syncing nor Synced, or read on
	// no shard.
	Currency       time.Time
	CurrencyShards int
}
