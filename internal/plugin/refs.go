package plugin

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/plugin/workspace"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

// refsConcurrency bounds the types refs reads at once.
const refsConcurrency = 16

// RefsResult is the answer of `refs`, as -o json|yaml prints it.
type RefsResult struct {
	Object workspace.Object `json:"object"`
	// Exists tells whether the object exists (references to an object
	// that does not exist dangle).
	Exists bool `json:"exists"`
	// ReferencedBy are the objects whose reference labels name it.
	ReferencedBy []workspace.Object `json:"referencedBy"`
	// Deleting are those of them that are being deleted: they no longer
	// block its deletion.
	Deleting []workspace.Object `json:"deleting,omitempty"`
	// Unlabelled are the types some of whose objects carry reference
	// labels and others not, or labels of different rules: those may
	// reference it unseen.
	Unlabelled []UnlabelledType `json:"unlabelled,omitempty"`
	// Unreadable are the types that could not be read.
	Unreadable []UnreadableType `json:"unreadable,omitempty"`
	// Types is how many types were read.
	Types int `json:"types"`
}

// UnlabelledType is a type with objects that are not labelled yet, or
// that are being relabelled.
type UnlabelledType struct {
	Kind     string `json:"kind"`
	Resource string `json:"resource"`
	// Count is how many of its objects in the workspace are not labelled.
	Count int `json:"count"`
	// Relabelling tells that its objects carry the labels of different
	// rules: the webhook is relabelling them after the rules changed, and
	// the labels of some may not be current.
	Relabelling bool `json:"relabelling,omitempty"`
}

// UnreadableType is a type refs could not read.
type UnreadableType struct {
	Resource string `json:"resource"`
	Error    string `json:"error"`
}

// Clean tells whether nothing references the object, as far as the
// labels tell.
func (r RefsResult) Clean() bool {
	return len(r.ReferencedBy) == 0 && len(r.Unlabelled) == 0 && len(r.Unreadable) == 0
}

// refs finds what references t among the objects of types: those that
// carry its reference label (one label-selected LIST per type, of the
// whole workspace), where a reference can come from. A dependent in
// another namespace than a namespaced object references it only where its
// rule reads a namespace next to the name: those are read in full and kept
// only if they hold the object's namespace.
func refs(ctx context.Context, r workspace.Reader, t workspace.Target, types []workspace.Type) RefsResult {
	res := RefsResult{Object: t.Object(), ReferencedBy: []workspace.Object{}, Types: len(types)}
	key := reflabels.Key(t.Mapping.Resource.GroupResource(), t.Name)

	var (
		wg   sync.WaitGroup
		lock sync.Mutex
		sem  = make(chan struct{}, refsConcurrency)
	)
	wg.Go(func() {
		_, err := r.GetMeta(ctx, t.Mapping.Resource, t.Namespace, t.Name)
		lock.Lock()
		defer lock.Unlock()
		res.Exists = err == nil || !apierrors.IsNotFound(err)
	})
	for _, typ := range types {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			tr := refsOfType(ctx, r, typ, t, key)
			lock.Lock()
			defer lock.Unlock()
			res.ReferencedBy = append(res.ReferencedBy, tr.hits...)
			res.Deleting = append(res.Deleting, tr.deleting...)
			if tr.unlabelled > 0 || tr.relabelling {
				res.Unlabelled = append(res.Unlabelled, UnlabelledType{Kind: typ.Kind, Resource: typ.GVR.GroupResource().String(), Count: tr.unlabelled, Relabelling: tr.relabelling})
			}
			if tr.err != nil {
				res.Unreadable = append(res.Unreadable, UnreadableType{Resource: typ.GVR.GroupResource().String(), Error: tr.err.Error()})
			}
		})
	}
	wg.Wait()
	slices.SortFunc(res.ReferencedBy, workspace.CompareObjects)
	slices.SortFunc(res.Deleting, workspace.CompareObjects)
	slices.SortFunc(res.Unlabelled, func(a, b UnlabelledType) int {
		return workspace.CompareObjects(workspace.Object{Kind: a.Kind, Resource: a.Resource}, workspace.Object{Kind: b.Kind, Resource: b.Resource})
	})
	slices.SortFunc(res.Unreadable, func(a, b UnreadableType) int {
		return workspace.CompareObjects(workspace.Object{Resource: a.Resource}, workspace.Object{Resource: b.Resource})
	})
	return res
}

// typeRefs is what refs found in one type.
type typeRefs struct {
	hits, deleting []workspace.Object
	unlabelled     int
	relabelling    bool
	err            error
}

// refsOfType reads the objects of typ that reference t (whose label key is
// key), and, if typ has labelled objects, how many are not labelled.
func refsOfType(ctx context.Context, r workspace.Reader, typ workspace.Type, t workspace.Target, key string) typeRefs {
	var tr typeRefs
	list, err := r.ListMeta(ctx, typ.GVR, "", metav1.ListOptions{LabelSelector: key})
	if err != nil {
		return typeRefs{err: ignorable(err)}
	}
	self := typ.GVR.GroupResource() == t.Mapping.Resource.GroupResource()
	across := 0
	add := func(m metav1.ObjectMeta) {
		o := workspace.Object{Kind: typ.Kind, Resource: typ.GVR.GroupResource().String(), Namespace: m.Namespace, Name: m.Name}
		if m.DeletionTimestamp != nil {
			tr.deleting = append(tr.deleting, o)
			return
		}
		tr.hits = append(tr.hits, o)
	}
	for _, item := range list.Items {
		switch {
		case self && item.Namespace == t.Namespace && item.Name == t.Name:
			// An object never blocks itself.
		case typ.Namespaced && t.Namespace != "" && item.Namespace != t.Namespace:
			across++
		default:
			add(item.ObjectMeta)
		}
	}
	if across > 0 {
		full, err := r.List(ctx, typ.GVR, "", metav1.ListOptions{LabelSelector: key, FieldSelector: "metadata.namespace!=" + t.Namespace})
		if err != nil {
			return typeRefs{err: fmt.Errorf("failed to read the %s in other namespaces: %w", typ.GVR.GroupResource(), err)}
		}
		for _, item := range full.Items {
			content := item.DeepCopy().Object
			delete(content, "metadata")
			if item.GetNamespace() != t.Namespace && holdsString(content, t.Namespace) {
				add(metav1.ObjectMeta{Namespace: item.GetNamespace(), Name: item.GetName(), DeletionTimestamp: item.GetDeletionTimestamp()})
			}
		}
	}
	// Does the type have labelled objects at all? Only then can its
	// objects be dependents, and those without labels matter.
	sample := list.Items
	if len(sample) == 0 {
		probe, err := r.ListMeta(ctx, typ.GVR, "", metav1.ListOptions{LabelSelector: depv1alpha1.LabelReferencesScheme, Limit: 1})
		if err != nil {
			return typeRefs{err: ignorable(err)}
		}
		if sample = probe.Items; len(sample) == 0 {
			return tr
		}
	}
	// Those without a scheme label are not labelled; those of another
	// scheme than the sample's show that the webhook is relabelling the
	// type after its rules changed (either may be the current one).
	scheme := depv1alpha1.LabelReferencesScheme
	var (
		wg                    sync.WaitGroup
		unlabelled, relabel   *metav1.PartialObjectMetadataList
		unlabelledErr, relErr error
	)
	wg.Go(func() {
		unlabelled, unlabelledErr = r.ListMeta(ctx, typ.GVR, "", metav1.ListOptions{LabelSelector: "!" + scheme})
	})
	wg.Go(func() {
		other := fmt.Sprintf("%s,%s!=%s", scheme, scheme, sample[0].Labels[scheme])
		relabel, relErr = r.ListMeta(ctx, typ.GVR, "", metav1.ListOptions{LabelSelector: other, Limit: 1})
	})
	wg.Wait()
	if err := cmp.Or(unlabelledErr, relErr); err != nil {
		tr.err = ignorable(err)
		return tr
	}
	tr.unlabelled, tr.relabelling = len(unlabelled.Items), len(relabel.Items) > 0
	return tr
}

// ignorable returns nil for errors that say the type cannot be read at
// all (it went away, or cannot be listed), err otherwise.
func ignorable(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
		return nil
	}
	return err
}

// holdsString tells whether v (decoded JSON) holds the string s anywhere.
func holdsString(v any, s string) bool {
	switch x := v.(type) {
	case string:
		return x == s
	case map[string]any:
		for _, e := range x {
			if holdsString(e, s) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if holdsString(e, s) {
				return true
			}
		}
	}
	return false
}

// typesRead says what refs read: the reference labels of the objects of n
// types, those of the workspace that can hold references (see
// workspace.DependentTypes).
func typesRead(n int) string {
	return fmt.Sprintf("read the reference labels of the objects of %s that the workspace binds or defines", plural(n, "type"))
}

// printRefs prints the answer of `refs` for people.
func printRefs(w io.Writer, t workspace.Target, r RefsResult) error {
	if len(r.ReferencedBy) > 0 {
		tb := newTable(w, "KIND", "NAMESPACE", "NAME")
		for _, o := range r.ReferencedBy {
			tb.row(o.Kind, o.Namespace, o.Name)
		}
		if err := tb.flush(); err != nil {
			return err
		}
	}
	var lines []string
	if len(r.ReferencedBy) == 0 {
		lines = append(lines, fmt.Sprintf("No object references %s (%s).", t.Describe(), typesRead(r.Types)))
	} else {
		lines = append(lines, fmt.Sprintf("%s %s %s (%s).", plural(len(r.ReferencedBy), "object"), verb(len(r.ReferencedBy), "references", "reference"), t.Describe(), typesRead(r.Types)))
	}
	switch {
	case !r.Exists && len(r.ReferencedBy) > 0:
		lines = append(lines, "It does not exist: these references dangle.")
	case !r.Exists:
		lines = append(lines, "It does not exist.")
	}
	if n := len(r.Deleting); n > 0 {
		names := make([]string, 0, n)
		for _, o := range r.Deleting {
			names = append(names, o.String())
		}
		lines = append(lines, fmt.Sprintf("%s that %s it %s being deleted and no longer %s: %s.", plural(n, "more object"), verb(n, "references", "reference"), verb(n, "is", "are"), verb(n, "counts", "count"), strings.Join(names, ", ")))
	}
	for _, u := range r.Unlabelled {
		if u.Count > 0 {
			lines = append(lines, fmt.Sprintf("%s %s not labelled yet; they may reference it too (kubectl get %s -A -l '!%s' lists them; kubectl dependencies why asks the webhook, which reads them).",
				plural(u.Count, u.Kind), verb(u.Count, "is", "are"), u.Resource, depv1alpha1.LabelReferencesScheme))
		}
		if u.Relabelling {
			lines = append(lines, fmt.Sprintf("The %s are being relabelled after their rules changed: the labels of some may not be current, and they may reference it too (kubectl dependencies why asks the webhook).", u.Resource))
		}
	}
	for _, u := range r.Unreadable {
		lines = append(lines, fmt.Sprintf("Could not read %s, whose objects may reference it: %s.", u.Resource, u.Error))
	}
	for _, l := range lines {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}

// verb picks the singular or plural form for n.
func verb(n int, singular, pluralForm string) string {
	if n == 1 {
		return singular
	}
	return pluralForm
}
