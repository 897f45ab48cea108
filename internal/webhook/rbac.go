package webhook

// Permissions of the webhook in the dep-ctrl workspace: discovering the
// APIExport's virtual workspace URLs, and reading DependencyRules and
// APIBindings through it (checked as apiexports/content); "access" on "/"
// lets the webhook into the workspace at all. Listing dependents
// needs the per-shard role of package dependents.
//
// +kubebuilder:rbac:urls=/,verbs=access
// +kubebuilder:rbac:groups=apis.kcp.io,resources=apiexportendpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=apis.kcp.io,resources=apiexports/content,verbs=get;list;watch
