// Package v1alpha1 contains the v1alpha1 API of the dependencies.opendefense.cloud
// group: the DependencyRule type, with which an API provider declares that one
// of its resource types references resources of other providers by name.
//
// +kubebuilder:object:generate=true
// +kubebuilder:ac:generate=true
// +groupName=dependencies.opendefense.cloud
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: "dependencies.opendefense.cloud", Version: "v1alpha1"}

	// SchemeGroupVersion is GroupVersion under the name generated code uses.
	SchemeGroupVersion = GroupVersion

	// SchemeBuilder is used to add go types to the GroupVersionKind scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types in this group-version to the given scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
