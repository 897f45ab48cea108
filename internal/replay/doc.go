package replay

// The webhook replica that replays deferred deletions is elected with a
// lease in the workspace of its kubeconfig (the dep-ctrl workspace).
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
