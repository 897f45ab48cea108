// Package controller reconciles DependencyRules: it resolves the workspaces of
// the protected APIExports and installs the validating webhook configuration
// in each of them.
package controller

// Permissions of the controller in the dep-ctrl workspace, which hosts the
// dependencies.opendefense.cloud APIExport. Rules and webhook configurations
// are reached through the APIExport's virtual workspace, which checks
// apiexports/content.
//
// +kubebuilder:rbac:groups=apis.kcp.io,resources=apiexportendpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=apis.kcp.io,resources=apiexports,verbs=get;list;watch
// +kubebuilder:rbac:groups=apis.kcp.io,resources=apiexports/content,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=dependencies.opendefense.cloud,resources=dependencyrules,verbs=get;list;watch
// +kubebuilder:rbac:groups=dependencies.opendefense.cloud,resources=dependencyrules/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;update;patch
