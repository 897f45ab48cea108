package fieldpath

import (
	"fmt"
	"strings"

	"github.com/buger/jsonparser"
)

// RelativePattern is a regular expression that, together with MaxLength,
// accepts the paths of the fields next to a referenced name (a namespace,
// group or kind): field names separated by dots, relative to the object
// that holds the name, without wildcards, e.g. namespace or ref.kind.
const RelativePattern = `^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`

// Value is one reference found in a dependent: the name of the referenced
// object and, if the reference names one, its namespace.
type Value struct {
	Namespace string
	Name      string
}

// RefersTo reports whether a reference whose namespace is ns (empty if it
// names none), held by a dependent in dependentNamespace (empty for a
// cluster-scoped dependent), can name an object in namespace (empty for a
// cluster-scoped object, which has no namespace to match). A reference
// without a namespace means the dependent's own; a cluster-scoped
// dependent's reference without one may mean an object in any namespace.
func RefersTo(ns, dependentNamespace, namespace string) bool {
	if namespace == "" {
		return true
	}
	if ns == "" {
		ns = dependentNamespace
	}
	return ns == "" || ns == namespace
}

// ReferenceSpec is a reference as a rule writes it (see FieldReference in
// the API): the path of the name and, relative to the object that holds
// the name, where its namespace, group and kind are.
type ReferenceSpec struct {
	// Path is the path of the name, e.g. .spec.parentRefs[*].name.
	Path string
	// NamespacePath is where the namespace is, e.g. namespace; empty: the
	// reference names no namespace.
	NamespacePath string
	// GroupPath is where the API group is; empty: no group is compared.
	GroupPath string
	// Group is the group of the referenced resource: only references naming
	// it count.
	Group string
	// DefaultGroup is the group a reference without the group field names;
	// nil: Group.
	DefaultGroup *string
	// KindPath is where the kind is; empty: no kind is compared.
	KindPath string
	// Kind is the kind of the referenced resource: only references naming
	// it count. Required with KindPath.
	Kind string
	// DefaultKind is the kind a reference without the kind field names;
	// nil: Kind.
	DefaultKind *string
}

// Reference is a parsed ReferenceSpec. References are comparable, and two
// are equal if and only if they find the same values; the zero Reference
// finds nothing.
type Reference struct {
	// name is the path of the name.
	name Path
	// parent is the path of the object that holds the name and leaf the
	// name's field in it; set only with siblings.
	parent Path
	leaf   Path
	// namespace is the path of the namespace, relative to the parent.
	namespace Path
	group     discriminator
	kind      discriminator
}

// discriminator is a field next to the name that must hold want (def
// standing in for a missing field) for the reference to count.
type discriminator struct {
	path      Path
	want, def string
}

// PathReference returns the reference of a name at p, in the dependent's
// namespace, of any group and kind.
func PathReference(p Path) Reference {
	return Reference{name: p}
}

// ParseReference parses a reference.
func ParseReference(spec ReferenceSpec) (Reference, error) {
	name, err := Parse(spec.Path)
	if err != nil {
		return Reference{}, err
	}
	r := Reference{name: name}
	if spec.NamespacePath == "" && spec.GroupPath == "" && spec.KindPath == "" {
		return r, nil
	}
	i := strings.LastIndexByte(name.s, '.')
	if strings.HasSuffix(name.s, wildcard) {
		return Reference{}, fmt.Errorf("invalid reference %q: a reference with a namespace, group or kind path must end its path with a field name", spec.Path)
	}
	r.parent, r.leaf = Path{s: name.s[:i]}, Path{s: name.s[i:]}
	relative := func(what, s string) (Path, error) {
		if s == "" {
			return Path{}, nil
		}
		p, err := Parse(s)
		if err != nil || strings.HasPrefix(s, ".") || strings.Contains(s, wildcard) {
			return Path{}, fmt.Errorf("invalid %s path %q: must be field names separated by dots, relative to the object that holds the name", what, s)
		}
		return p, nil
	}
	if r.namespace, err = relative("namespace", spec.NamespacePath); err != nil {
		return Reference{}, err
	}
	if r.group.path, err = relative("group", spec.GroupPath); err != nil {
		return Reference{}, err
	}
	r.group.want, r.group.def = spec.Group, spec.Group
	if spec.DefaultGroup != nil {
		r.group.def = *spec.DefaultGroup
	}
	if r.kind.path, err = relative("kind", spec.KindPath); err != nil {
		return Reference{}, err
	}
	if spec.KindPath != "" && spec.Kind == "" {
		return Reference{}, fmt.Errorf("invalid reference %q: a kind path needs the kind", spec.Path)
	}
	r.kind.want, r.kind.def = spec.Kind, spec.Kind
	if spec.DefaultKind != nil {
		r.kind.def = *spec.DefaultKind
	}
	return r, nil
}

// String renders the reference: the path of the name, followed by what is
// read next to it, e.g. ".spec.parentRefs[*].name (namespace: namespace,
// kind: kind=Gateway)".
func (r Reference) String() string {
	var extra []string
	if r.namespace != (Path{}) {
		extra = append(extra, "namespace: "+r.namespace.s[1:])
	}
	for _, d := range []struct {
		what string
		discriminator
	}{{"group", r.group}, {"kind", r.kind}} {
		if d.path == (Path{}) {
			continue
		}
		s := fmt.Sprintf("%s: %s=%q", d.what, d.path.s[1:], d.want)
		if d.def != d.want {
			s += fmt.Sprintf(" (missing: %q)", d.def)
		}
		extra = append(extra, s)
	}
	if len(extra) == 0 {
		return r.name.String()
	}
	return r.name.String() + " (" + strings.Join(extra, ", ") + ")"
}

// Name returns the path of the name.
func (r Reference) Name() Path {
	return r.name
}

// CrossesNamespaces reports whether the reference may name an object in
// another namespace than the dependent's.
func (r Reference) CrossesNamespaces() bool {
	return r.namespace != (Path{})
}

// Paths returns every path the reference reads, from the root of the
// object: the name's, then the namespace's, group's and kind's, if set.
func (r Reference) Paths() []Path {
	paths := []Path{r.name}
	for _, p := range []Path{r.namespace, r.group.path, r.kind.path} {
		if p != (Path{}) {
			paths = append(paths, Path{s: r.parent.s + p.s})
		}
	}
	return paths
}

// EachJSON calls fn for every reference found in the JSON object data, in
// document order, until fn returns false: the name (a string, or a number
// in its canonical form, see Path.EachJSON) and the namespace if the
// reference has a namespace path and finds a non-empty string there. An
// element whose group or kind is not the wanted one is left out. See
// Path.EachJSON for the errors it returns.
func (r Reference) EachJSON(data []byte, fn func(Value) bool) error {
	if r.parent == (Path{}) && r.leaf == (Path{}) {
		return r.name.EachJSON(data, func(name string) bool { return fn(Value{Name: name}) })
	}
	element := func(raw []byte, typ jsonparser.ValueType) (bool, error) {
		if typ != jsonparser.Object {
			return true, nil
		}
		v, ok, err := r.read(raw)
		if err != nil || !ok {
			return err == nil, err
		}
		return fn(v), nil
	}
	if r.parent == (Path{}) {
		// The name is a field of the object itself.
		_, err := element(data, jsonparser.Object)
		return err
	}
	return r.parent.walkJSON(data, element)
}

// ResolveJSON returns every reference found in the JSON object data, in
// document order, or nil if there is none. See EachJSON.
func (r Reference) ResolveJSON(data []byte) ([]Value, error) {
	var values []Value
	err := r.EachJSON(data, func(v Value) bool {
		values = append(values, v)
		return true
	})
	if err != nil {
		return nil, err
	}
	return values, nil
}

// read reads the reference held by the object obj (the parent of the
// name): ok is false if it holds no name, or names another group or kind.
func (r Reference) read(obj []byte) (v Value, ok bool, err error) {
	first := func(p Path) (string, bool, error) {
		var value string
		found := false
		err := p.EachJSON(obj, func(s string) bool {
			value, found = s, true
			return false
		})
		return value, found, err
	}
	if v.Name, ok, err = first(r.leaf); err != nil || !ok {
		return Value{}, false, err
	}
	for _, d := range []discriminator{r.group, r.kind} {
		if d.path == (Path{}) {
			continue
		}
		value, found, err := first(d.path)
		if err != nil {
			return Value{}, false, err
		}
		if !found {
			value = d.def
		}
		if value != d.want {
			return Value{}, false, nil
		}
	}
	if r.namespace != (Path{}) {
		if v.Namespace, _, err = first(r.namespace); err != nil {
			return Value{}, false, err
		}
	}
	return v, true, nil
}
