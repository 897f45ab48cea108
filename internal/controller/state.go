package controller

import (
	"context"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/sdk/apis/core"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
)

// State is everything a reconcile decides from, read from kcp at its start.
type State struct {
	// Rules are all DependencyRules, sorted by key.
	Rules []depv1alpha1.DependencyRule
	// Workspaces maps the path of every workspace that binds the APIExport
	// to its logical cluster. kcp records the path of a workspace in the
	// kcp.io/path annotation of every APIBinding in it, and does not let
	// anyone set another value.
	Workspaces map[string]logicalcluster.Name
	// Configs are the managed webhook configurations, by logical cluster.
	Configs map[logicalcluster.Name]*admissionregistrationv1.ValidatingWebhookConfiguration
	// Clients write into the workspaces that bind the APIExport, each through
	// the virtual workspace of its shard, by logical cluster.
	Clients map[logicalcluster.Name]client.Client
}

// Observer reads the State.
type Observer interface {
	// Observe reads the complete state, or fails: a reconcile must never act
	// on a view of some shards as if it were complete.
	Observe(ctx context.Context) (*State, error)
}

// vwObserver observes the state through the APIExport's virtual workspace
// on every shard.
type vwObserver struct {
	vw *vw.VirtualWorkspace
}

// NewObserver returns an Observer that lists, through the virtual workspace
// of every shard, all APIBindings to the export, all DependencyRules and all
// managed webhook configurations.
func NewObserver(rules *vw.VirtualWorkspace) Observer {
	return vwObserver{vw: rules}
}

// Observe implements Observer.
func (o vwObserver) Observe(ctx context.Context) (*State, error) {
	shards, err := o.vw.ListRules(ctx)
	if err != nil {
		return nil, err
	}
	state := &State{
		Workspaces: map[string]logicalcluster.Name{},
		Configs:    map[logicalcluster.Name]*admissionregistrationv1.ValidatingWebhookConfiguration{},
		Clients:    map[logicalcluster.Name]client.Client{},
	}
	for _, s := range shards {
		for i := range s.Bindings {
			b := &s.Bindings[i]
			cluster := logicalcluster.From(b)
			c, err := s.Cluster(cluster.Path())
			if err != nil {
				return nil, err
			}
			state.Clients[cluster] = c
			if path := b.Annotations[core.LogicalClusterPathAnnotationKey]; path != "" {
				state.Workspaces[path] = cluster
			}
		}
		state.Rules = append(state.Rules, s.Rules.Items...)

		wildcard, err := s.Cluster(logicalcluster.Wildcard)
		if err != nil {
			return nil, err
		}
		configs := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
		if err := wildcard.List(ctx, configs, client.MatchingLabels{webhookconfig.ManagedByLabel: webhookconfig.ManagedByValue}); err != nil {
			return nil, fmt.Errorf("failed to list ValidatingWebhookConfigurations through %s: %w", s.URL, err)
		}
		for i := range configs.Items {
			if c := &configs.Items[i]; c.Name == webhookconfig.Name {
				state.Configs[logicalcluster.From(c)] = c
			}
		}
	}
	slices.SortFunc(state.Rules, func(a, b depv1alpha1.DependencyRule) int {
		return kcp.KeyOf(&a).Compare(kcp.KeyOf(&b))
	})
	return state, nil
}
