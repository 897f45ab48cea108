package plugin

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object identifies an object in the commands' output.
type Object struct {
	// Kind is the object's kind, e.g. VirtualMachine.
	Kind string `json:"kind"`
	// Resource is its resource, qualified with its group as kubectl
	// takes it: virtualmachines.compute.test.io.
	Resource string `json:"resource"`
	// Namespace is empty for a cluster-scoped object.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String renders the object as Kind/name or Kind/namespace/name, as the
// webhook's messages do.
func (o Object) String() string {
	if o.Namespace == "" {
		return o.Kind + "/" + o.Name
	}
	return o.Kind + "/" + o.Namespace + "/" + o.Name
}

func compareObjects(a, b Object) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// Target is an object named on the command line, resolved through
// discovery.
type Target struct {
	Mapping   *meta.RESTMapping
	Namespace string
	Name      string
}

// Object returns the target as an Object.
func (t Target) Object() Object {
	return Object{Kind: t.Mapping.GroupVersionKind.Kind, Resource: t.Mapping.Resource.GroupResource().String(), Namespace: t.Namespace, Name: t.Name}
}

// describe renders the target as the webhook names it: vpcs.network.test.io
// "vpc-a" in namespace "default".
func (t Target) describe() string {
	s := fmt.Sprintf("%s %q", t.Mapping.Resource.GroupResource(), t.Name)
	if t.Namespace != "" {
		s += fmt.Sprintf(" in namespace %q", t.Namespace)
	}
	return s
}

// errUsage marks an error in the command line (exit code 2 with a hint).
var errUsage = errors.New("usage")

// splitTypeName reads the object a command is about: TYPE/NAME as one
// argument, or TYPE and NAME as two, as kubectl takes them.
func splitTypeName(args []string) (string, string, error) {
	switch len(args) {
	case 1:
		typ, name, ok := strings.Cut(args[0], "/")
		if !ok || typ == "" || name == "" || strings.Contains(name, "/") {
			return "", "", fmt.Errorf("%w: expected TYPE/NAME, got %q", errUsage, args[0])
		}
		return typ, name, nil
	case 2:
		if strings.Contains(args[0], "/") || args[0] == "" || args[1] == "" || strings.Contains(args[1], "/") {
			return "", "", fmt.Errorf("%w: expected TYPE/NAME or TYPE NAME, got %q", errUsage, strings.Join(args, " "))
		}
		return args[0], args[1], nil
	default:
		return "", "", fmt.Errorf("%w: expected one object, TYPE/NAME or TYPE NAME", errUsage)
	}
}

// resolve resolves TYPE/NAME (or TYPE NAME) into a Target in namespace
// (ignored for a cluster-scoped type).
func resolve(mapper meta.RESTMapper, args []string, namespace string) (Target, error) {
	typ, name, err := splitTypeName(args)
	if err != nil {
		return Target{}, err
	}
	m, err := mappingFor(mapper, typ)
	if err != nil {
		return Target{}, err
	}
	t := Target{Mapping: m, Name: name}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		t.Namespace = namespace
	}
	return t, nil
}

// mappingFor resolves a type as kubectl does (cli-runtime's
// resource.Builder): a resource (plural, singular or short name, with an
// optional version and group: vpcs, vpc, vpcs.v1.network.test.io,
// vpcs.network.test.io) or a kind (VPC, VPC.network.test.io), through the
// RESTMapper of discovery.
func mappingFor(mapper meta.RESTMapper, arg string) (*meta.RESTMapping, error) {
	fullGVR, gr := schema.ParseResourceArg(arg)
	var gvk schema.GroupVersionKind
	if fullGVR != nil {
		gvk, _ = mapper.KindFor(*fullGVR)
	}
	if gvk.Empty() {
		gvk, _ = mapper.KindFor(gr.WithVersion(""))
	}
	if !gvk.Empty() {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("failed to map %q: %w", arg, err)
		}
		return m, nil
	}
	fullGVK, gk := schema.ParseKindArg(arg)
	if fullGVK != nil {
		if m, err := mapper.RESTMapping(fullGVK.GroupKind(), fullGVK.Version); err == nil {
			return m, nil
		}
	}
	m, err := mapper.RESTMapping(gk)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("the server doesn't have a resource type %q", gr.Resource)
		}
		return nil, fmt.Errorf("failed to map %q: %w", arg, err)
	}
	return m, nil
}
