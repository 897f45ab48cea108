// Package fieldpathtest helps tests that use field paths.
package fieldpathtest

import "github.com/opendefensecloud/dependency-controller/internal/fieldpath"

// MustParse returns the reference of a name at the field path s (in the
// dependent's namespace, of any group and kind), and panics if s is not a
// valid field path: for paths that are known to be valid, such as
// constants in tests.
func MustParse(s string) fieldpath.Reference {
	p, err := fieldpath.Parse(s)
	if err != nil {
		panic(err)
	}
	return fieldpath.PathReference(p)
}

// MustParseReference is like fieldpath.ParseReference but panics if spec
// is not valid.
func MustParseReference(spec fieldpath.ReferenceSpec) fieldpath.Reference {
	r, err := fieldpath.ParseReference(spec)
	if err != nil {
		panic(err)
	}
	return r
}
