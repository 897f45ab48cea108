// Package controller reconciles DependencyRules: it finds the workspaces of
// the protected APIExports and keeps the validating webhook configuration in
// each of them (DELETE of the protected resources) and in the workspace of
// every rule (CREATE and UPDATE of its dependents), and reports the outcome
// in every rule's status. See Reconciler.
package controller

// Permissions of the controller in the dep-ctrl workspace, which hosts the
// dependencies.opendefense.cloud APIExport. DependencyRules, APIBindings,
// webhook configurations and events in provider workspaces are reached
// through the APIExport's virtual workspace, which checks apiexports/content
// with the verb of each request; the permission claims of the APIExport do
// the rest. Leases and events are for leader election; "access" on "/" lets
// the controller into the workspace at all.
//
// +kubebuilder:rbac:urls=/,verbs=access
// +kubebuilder:rbac:groups=apis.kcp.io,resources=apiexportendpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=apis.kcp.io,resources=apiexports,verbs=get;list;watch
// +kubebuilder:rbac:groups=apis.kcp.io,resources=apiexports/content,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
