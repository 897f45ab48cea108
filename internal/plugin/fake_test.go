package plugin

import (
	"github.com/opendefensecloud/dependency-controller/internal/plugin/workspace"
	"github.com/opendefensecloud/dependency-controller/internal/plugin/workspace/workspacetest"
)

// The types of the tests (see package workspacetest): VPCs
// (network.test.io), Subnets that reference VPCs, and VirtualMachines
// (compute.test.io) that reference both; plus a cluster-scoped Zone.
var (
	vpcsGVR    = workspacetest.VPCs
	subnetsGVR = workspacetest.Subnets
	vmsGVR     = workspacetest.VirtualMachines
	zonesGVR   = workspacetest.Zones

	testMapper = workspacetest.Mapper
	// obj returns an object of a resource with labels and a spec.
	obj = workspacetest.NewObject
)

var testTypes = []workspace.Type{
	{GVR: vmsGVR, Kind: "VirtualMachine", Namespaced: true},
	{GVR: subnetsGVR, Kind: "Subnet", Namespaced: true},
	{GVR: vpcsGVR, Kind: "VPC", Namespaced: true},
	{GVR: zonesGVR, Kind: "Zone"},
}
