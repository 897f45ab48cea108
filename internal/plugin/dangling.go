package plugin

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

// DanglingResult is the answer of `dangling`, as -o json|yaml prints it.
type DanglingResult struct {
	// Dangling are the dependents whose latest DanglingReference Event
	// still holds: the dependent exists, and, where the Event names the
	// reference, still references an object that does not exist. Newest
	// first.
	Dangling []DanglingReference `json:"dangling"`
	// Resolved is how many dependents with such Events no longer dangle
	// (gone, recreated, their reference changed or its object created).
	Resolved int `json:"resolved"`
}

// DanglingReference is a dependent that references a missing object.
type DanglingReference struct {
	Object
	// Reference is the missing object, as the Event names it; empty if
	// the message did not parse (see Message).
	Reference *Reference `json:"reference,omitempty"`
	// Message is the Event's message.
	Message string `json:"message"`
	// LastSeen is when the Event was last recorded.
	LastSeen time.Time `json:"lastSeen"`
}

// Reference is the object a dangling reference names.
type Reference struct {
	// Resource is the resource as the Event names it, e.g.
	// vpcs.network.test.io.
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String renders the reference as resource/name, with its namespace if any.
func (r Reference) String() string {
	s := r.Resource + "/" + r.Name
	if r.Namespace != "" {
		s += " in " + r.Namespace
	}
	return s
}

// danglingMessage reads the webhook's message: `<Kind>/<namespace>/<name>
// references <resource> "<name>" in namespace "<ns>", which does not
// exist`; the namespace part is absent for a cluster-scoped object.
var danglingMessage = regexp.MustCompile(`references (\S+) "([^"]+)"(?: in namespace "([^"]*)")?`)

// parseDangling reads the reference from an Event's message, if it names
// one.
func parseDangling(msg string) *Reference {
	m := danglingMessage.FindStringSubmatch(msg)
	if m == nil {
		return nil
	}
	return &Reference{Resource: m[1], Name: m[2], Namespace: m[3]}
}

// eventTime is when an Event was last recorded.
func eventTime(ev corev1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}

// latestPerObject keeps the newest Event of each involved object, newest
// first.
func latestPerObject(events []corev1.Event) []corev1.Event {
	type objKey struct{ apiVersion, kind, namespace, name string }
	latest := map[objKey]corev1.Event{}
	for _, ev := range events {
		inv := ev.InvolvedObject
		k := objKey{inv.APIVersion, inv.Kind, inv.Namespace, inv.Name}
		if prev, ok := latest[k]; !ok || eventTime(ev).After(eventTime(prev)) {
			latest[k] = ev
		}
	}
	out := make([]corev1.Event, 0, len(latest))
	for _, ev := range latest {
		out = append(out, ev)
	}
	slices.SortFunc(out, func(a, b corev1.Event) int {
		return cmp.Or(eventTime(b).Compare(eventTime(a)), cmp.Compare(a.InvolvedObject.Kind, b.InvolvedObject.Kind),
			cmp.Compare(a.InvolvedObject.Namespace, b.InvolvedObject.Namespace), cmp.Compare(a.InvolvedObject.Name, b.InvolvedObject.Name))
	})
	return out
}

// dangling lists the dangling references that the webhook's Events report
// in namespace (all if empty), keeping those that still hold.
func dangling(ctx context.Context, e *env, namespace string) (DanglingResult, error) {
	events, err := e.reader.Events(ctx, namespace, "type="+corev1.EventTypeWarning+",reason="+depv1alpha1.EventReasonDanglingReference)
	if err != nil {
		return DanglingResult{}, fmt.Errorf("failed to list the %s Events: %w", depv1alpha1.EventReasonDanglingReference, err)
	}
	res := DanglingResult{Dangling: []DanglingReference{}}
	for _, ev := range latestPerObject(events) {
		d, holds, err := stillDangling(ctx, e, ev)
		if err != nil {
			return DanglingResult{}, err
		}
		if !holds {
			res.Resolved++
			continue
		}
		res.Dangling = append(res.Dangling, d)
	}
	return res, nil
}

// stillDangling checks the Event's claim: the dependent still exists (the
// same object: its UID), and, where the message names the reference, the
// dependent still carries its reference label and the object it names
// does not exist.
func stillDangling(ctx context.Context, e *env, ev corev1.Event) (DanglingReference, bool, error) {
	inv := ev.InvolvedObject
	gv, err := schema.ParseGroupVersion(inv.APIVersion)
	if err != nil {
		return DanglingReference{}, false, nil
	}
	m, err := e.mapper.RESTMapping(gv.WithKind(inv.Kind).GroupKind(), gv.Version)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return DanglingReference{}, false, nil
		}
		return DanglingReference{}, false, fmt.Errorf("failed to map %s %s: %w", inv.APIVersion, inv.Kind, err)
	}
	d := DanglingReference{
		Object:    Object{Kind: inv.Kind, Resource: m.Resource.GroupResource().String(), Namespace: inv.Namespace, Name: inv.Name},
		Reference: parseDangling(ev.Message), Message: ev.Message, LastSeen: eventTime(ev),
	}
	dep, err := e.reader.GetMeta(ctx, m.Resource, inv.Namespace, inv.Name)
	switch {
	case apierrors.IsNotFound(err):
		return d, false, nil
	case err != nil:
		return d, false, fmt.Errorf("failed to read %s: %w", d.Object, err)
	case inv.UID != "" && dep.UID != inv.UID:
		return d, false, nil
	}
	if d.Reference == nil {
		return d, true, nil
	}
	tm, err := mappingFor(e.mapper, d.Reference.Resource)
	if err != nil {
		// The workspace does not serve the type: the object cannot exist.
		return d, true, nil
	}
	// The message may name the resource without its group; the label key
	// needs the group the workspace serves it under.
	target := tm.Resource.GroupResource()
	if _, ok := dep.Labels[depv1alpha1.LabelReferencesScheme]; ok {
		if _, ok := dep.Labels[reflabels.Key(target, d.Reference.Name)]; !ok {
			// Labelled, and no longer with this reference.
			return d, false, nil
		}
	}
	ns := d.Reference.Namespace
	if tm.Scope.Name() != meta.RESTScopeNameNamespace {
		ns = ""
	}
	switch _, err := e.reader.GetMeta(ctx, tm.Resource, ns, d.Reference.Name); {
	case err == nil:
		return d, false, nil
	case !apierrors.IsNotFound(err):
		return d, false, fmt.Errorf("failed to read %s: %w", d.Reference, err)
	}
	return d, true, nil
}

// printDangling prints the answer of `dangling` for people.
func printDangling(w io.Writer, r DanglingResult, now time.Time) error {
	if len(r.Dangling) > 0 {
		tb := newTable(w, "KIND", "NAMESPACE", "NAME", "REFERENCE", "AGE")
		for _, d := range r.Dangling {
			ref := d.Message
			if d.Reference != nil {
				ref = d.Reference.String()
			}
			tb.row(d.Kind, d.Namespace, d.Name, ref, duration.HumanDuration(now.Sub(d.LastSeen)))
		}
		if err := tb.flush(); err != nil {
			return err
		}
	}
	var line string
	if len(r.Dangling) == 0 {
		line = "No dangling references reported"
	} else {
		line = fmt.Sprintf("%s %s objects that do not exist", plural(len(r.Dangling), "object"), verb(len(r.Dangling), "references", "reference"))
	}
	if r.Resolved > 0 {
		line += fmt.Sprintf(" (%d reported earlier no longer dangle)", r.Resolved)
	}
	_, err := fmt.Fprintln(w, line+".")
	return err
}
