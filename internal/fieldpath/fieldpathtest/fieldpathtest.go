// Package fieldpathtest helps tests that use field paths.
package fieldpathtest

import "github.com/opendefensecloud/dependency-controller/internal/fieldpath"

// MustParse is like fieldpath.Parse but panics if s is not a valid field
// path: for paths that are known to be valid, such as constants in tests.
func MustParse(s string) fieldpath.Path {
	p, err := fieldpath.Parse(s)
	if err != nil {
		panic(err)
	}
	return p
}
