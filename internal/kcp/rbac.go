package kcp

// Permissions the WorkspaceResolver needs in root and in every workspace on
// the way to a protected provider workspace: entering the workspace (kcp
// checks verb "access" on the non-resource URL "/" inside it) and reading its
// child Workspaces.
//
// +kubebuilder:rbac:urls=/,verbs=access
// +kubebuilder:rbac:groups=tenancy.kcp.io,resources=workspaces,verbs=get;list;watch
