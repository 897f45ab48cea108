// Command controller watches DependencyRules through the APIExport's virtual
// workspace and installs the deletion-protection webhook in every provider
// workspace whose resources are protected.
package main

import "github.com/opendefensecloud/dependency-controller/internal/command"

func main() {
	command.Main("controller", newOptions())
}
