package kcp

// Permissions the WorkspaceResolver needs in root and in every workspace on
// the way to a protected provider workspace: entering the workspace and
// reading its child Workspaces.
//
// +kubebuilder:rbac:groups=tenancy.kcp.io,resources=workspaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=tenancy.kcp.io,resources=workspaces/content,verbs=access
