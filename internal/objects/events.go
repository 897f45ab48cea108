package objects

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/index/route"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// Event records a core Event of type eventType (Normal or Warning) with
// reason and msg about obj, an object of src of the given kind, in its
// workspace (in its namespace, or default for a cluster-scoped object);
// see CreateEvent for what it needs.
func (c *Client) Event(ctx context.Context, src index.Source, kind string, obj kcp.Meta, eventType, reason, msg string) error {
	now := metav1.NewTime(time.Now())
	namespace := obj.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	ev := corev1.Event{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: obj.Name + ".", Namespace: namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: src.Resource.GroupVersion().String(), Kind: kind,
			Namespace: obj.Namespace, Name: obj.Name, UID: obj.UID,
		},
		Reason: reason, Message: msg, Type: eventType,
		Source:         corev1.EventSource{Component: "dependency-webhook"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return c.CreateEvent(ctx, src, obj.Cluster, namespace, body)
}

// CreateEvent creates the core Event body (JSON) in namespace of cluster,
// through the virtual workspace of src on the shard that serves cluster
// (or, where that is not known, the first shard of src): the provider's
// APIExport must claim events, and the workspace must have accepted the
// claim.
func (c *Client) CreateEvent(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace string, body []byte) error {
	shard, ok, err := c.router.Serving(src, cluster)
	if err != nil {
		return err
	}
	if !ok {
		shards, err := c.router.Shards(src, cluster)
		if err != nil {
			return err
		}
		if len(shards) == 0 {
			return fmt.Errorf("%s: %w", src, route.ErrNotInspected)
		}
		shard = shards[0]
	}
	return c.router.Retry(ctx, func() error { return shard.Create(ctx, eventsPath(cluster, namespace), nil, body) })
}

// eventsPath is the path of the core Events of namespace in cluster.
func eventsPath(cluster logicalcluster.Name, namespace string) []string {
	return []string{cluster.Path().RequestPath(), "api", "v1", "namespaces", namespace, "events"}
}
