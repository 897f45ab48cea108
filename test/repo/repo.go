// Package repo locates the repository for the project's test helpers.
package repo

import (
	"path/filepath"
	"runtime"
)

// Root returns the root directory of the repository, found from the
// location of this source file.
func Root() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("repo: cannot determine the source location")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}
