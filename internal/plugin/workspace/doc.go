// Package workspace is how the kubectl plugin (package plugin) reads a
// workspace: the clients of the kubeconfig flags (Open, Session), the
// Reader of objects, metadata, dry-run DELETEs and Events, the objects
// (TYPE/NAME) and types a user names, resolved through discovery as
// kubectl resolves them (Target, Resolve, MappingFor), and the types the
// workspace serves and binds from APIExports, which may hold references
// (DiscoverTypes, DependentTypes). It imports nothing of package plugin.
package workspace
