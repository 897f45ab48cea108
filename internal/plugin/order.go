package plugin

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/resource"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

// splitTypes reads the types of `order`: TYPE[,TYPE...] in one or more
// arguments.
func splitTypes(args []string) ([]string, error) {
	var types []string
	for _, a := range args {
		for _, t := range strings.Split(a, ",") {
			switch {
			case t == "":
				continue
			case strings.Contains(t, "/"):
				return nil, fmt.Errorf("%w: order takes types (TYPE[,TYPE...]) or files (-f), not the object %q", errUsage, t)
			}
			types = append(types, t)
		}
	}
	if len(types) == 0 {
		return nil, fmt.Errorf("%w: order needs types (TYPE[,TYPE...]) or files (-f)", errUsage)
	}
	return types, nil
}

// scope is where a list of one type reads: one namespace, or all (or the
// cluster scope) if empty.
type scope struct {
	mapping   *meta.RESTMapping
	namespace string
}

// nodesOfTypes lists the objects of the types in namespace (all if
// allNamespaces), as stored, with their reference labels.
func nodesOfTypes(ctx context.Context, e *env, typeArgs []string, namespace string, allNamespaces bool) ([]node, error) {
	var nodes []node
	seen := map[schema.GroupResource]bool{}
	for _, a := range typeArgs {
		m, err := mappingFor(e.mapper, a)
		if err != nil {
			return nil, err
		}
		if seen[m.Resource.GroupResource()] {
			continue
		}
		seen[m.Resource.GroupResource()] = true
		s := scope{mapping: m}
		if m.Scope.Name() == meta.RESTScopeNameNamespace && !allNamespaces {
			s.namespace = namespace
		}
		items, err := listScope(ctx, e.reader, s)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			nodes = append(nodes, nodeOf(m, item))
		}
	}
	return nodes, nil
}

// nodesOfFiles reads the objects of manifests (files, directories, URLs;
// YAML or JSON, several documents, lists), parsed as kubectl does, and
// returns them as stored, with their reference labels (one list per type
// and namespace), and those that are not stored. Objects without a
// namespace are in namespace; with enforceNamespace (-n), an object of
// another namespace is an error, as in kubectl.
func nodesOfFiles(ctx context.Context, e *env, opts *resource.FilenameOptions, namespace string, enforceNamespace bool) ([]node, []Object, error) {
	infos, err := resource.NewLocalBuilder().Unstructured().ContinueOnError().FilenameParam(false, opts).Flatten().Do().Infos()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to read the manifests: %w", err)
	}
	type scopeKey struct {
		gvr       schema.GroupVersionResource
		namespace string
	}
	type wanted struct {
		scope
		names map[string]bool
	}
	byScope := map[scopeKey]*wanted{}
	var scopes []*wanted
	for _, info := range infos {
		gvk := info.Object.GetObjectKind().GroupVersionKind()
		m, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to map %s %q of %s: %w", gvk.Kind, info.Name, info.Source, err)
		}
		k := scopeKey{gvr: m.Resource}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			switch {
			case info.Namespace == "":
				k.namespace = namespace
			case enforceNamespace && info.Namespace != namespace:
				return nil, nil, fmt.Errorf("%w: the namespace of %s %q in %s, %q, does not match the namespace %q (-n)", errUsage, gvk.Kind, info.Name, info.Source, info.Namespace, namespace)
			default:
				k.namespace = info.Namespace
			}
		}
		w := byScope[k]
		if w == nil {
			w = &wanted{scope: scope{mapping: m, namespace: k.namespace}, names: map[string]bool{}}
			byScope[k] = w
			scopes = append(scopes, w)
		}
		w.names[info.Name] = true
	}
	var (
		nodes   []node
		missing []Object
	)
	for _, w := range scopes {
		items, err := listScope(ctx, e.reader, w.scope)
		if err != nil {
			return nil, nil, err
		}
		for _, item := range items {
			if w.names[item.Name] {
				nodes = append(nodes, nodeOf(w.mapping, item))
				delete(w.names, item.Name)
			}
		}
		for name := range w.names {
			missing = append(missing, Object{Kind: w.mapping.GroupVersionKind.Kind, Resource: w.mapping.Resource.GroupResource().String(), Namespace: w.namespace, Name: name})
		}
	}
	slices.SortFunc(missing, compareObjects)
	return nodes, missing, nil
}

// listScope lists the metadata of the objects of a scope, page by page.
func listScope(ctx context.Context, r Reader, s scope) ([]metav1.PartialObjectMetadata, error) {
	var items []metav1.PartialObjectMetadata
	opts := metav1.ListOptions{Limit: 5000}
	for {
		list, err := r.ListMeta(ctx, s.mapping.Resource, s.namespace, opts)
		if err != nil {
			where := ""
			if s.namespace != "" {
				where = " in namespace " + s.namespace
			}
			return nil, fmt.Errorf("failed to list %s%s: %w", s.mapping.Resource.GroupResource(), where, err)
		}
		items = append(items, list.Items...)
		if list.Continue == "" {
			return items, nil
		}
		opts.Continue = list.Continue
	}
}

// nodeOf returns the node of a listed object of mapping.
func nodeOf(m *meta.RESTMapping, item metav1.PartialObjectMetadata) node {
	gr := m.Resource.GroupResource()
	obj := Object{Kind: m.GroupVersionKind.Kind, Resource: gr.String(), Namespace: item.Namespace, Name: item.Name}
	return newNode(obj, reflabels.Key(gr, item.Name), item.Labels, item.DeletionTimestamp != nil)
}

// printOrder prints the answer of `order` for people.
func printOrder(w io.Writer, r OrderResult) error {
	objects := 0
	if len(r.Waves) > 0 {
		tb := newTable(w, "WAVE", "KIND", "NAMESPACE", "NAME")
		for _, wave := range r.Waves {
			for _, o := range wave.Objects {
				label := strconv.Itoa(wave.Wave)
				if o.Cycle > 0 {
					label += fmt.Sprintf(" (cycle %d)", o.Cycle)
				}
				tb.row(label, o.Kind, o.Namespace, o.Name)
				objects++
			}
		}
		if err := tb.flush(); err != nil {
			return err
		}
	}
	var lines []string
	switch {
	case objects == 0:
		lines = append(lines, "No objects to order.")
	case len(r.Waves) == 1 && len(r.Cycles) == 0:
		lines = append(lines, fmt.Sprintf("%s in 1 wave: none of them references another, so they can be deleted together.", plural(objects, "object")))
	default:
		lines = append(lines, fmt.Sprintf("%s in %s: delete a wave once the objects of the waves before it are gone or being deleted (an object referenced from outside these is still refused).", plural(objects, "object"), plural(len(r.Waves), "wave")))
	}
	for _, c := range r.Cycles {
		names := make([]string, 0, len(c.Objects))
		for _, o := range c.Objects {
			names = append(names, o.String())
		}
		lines = append(lines, fmt.Sprintf("Cycle %d (wave %d): %s reference each other, so every DELETE of them is refused: set the annotation %s=true on one of them, or delete their namespace (kcp's teardown breaks cycles).",
			c.Cycle, c.Wave, strings.Join(names, ", "), depv1alpha1.AnnotationSkipProtection))
	}
	if n := len(r.Missing); n > 0 {
		names := make([]string, 0, n)
		for _, o := range r.Missing {
			names = append(names, o.String())
		}
		lines = append(lines, fmt.Sprintf("%s of the manifests %s not exist: %s.", plural(n, "object"), verb(n, "does", "do"), strings.Join(names, ", ")))
	}
	for _, l := range lines {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}
