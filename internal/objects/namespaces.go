package objects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// How long what NamespaceTerminating learned is kept: a namespace that is
// being deleted stays so, one that is not may start any time; that a
// namespace existed is remembered for a day.
const (
	terminatingTTL    = 10 * time.Minute
	notTerminatingTTL = 2 * time.Second
	existedTTL        = 24 * time.Hour
)

// namespaceKey is a namespace of a logical cluster.
type namespaceKey struct {
	cluster   logicalcluster.Name
	namespace string
}

// namespaceState is what NamespaceTerminating learned of a namespace.
type namespaceState struct {
	terminating bool
	at          time.Time
}

// NamespaceTerminating reports whether namespace in cluster is being
// deleted: kcp refuses to create anything in it then, dependents included,
// so nothing can come to reference an object in it. It asks kcp itself,
// with a dry-run CREATE of an Event in the namespace through the virtual
// workspace of src, the protected type, on the shard that serves cluster
// (the provider's APIExport claims events, the workspace accepted the claim,
// and the provider granted the webhook create on its content); kcp's
// namespace lifecycle admission refuses it with the cause
// NamespaceTerminating in a namespace being deleted. It returns false, with
// the error, when it cannot tell (no claim, no grant): the caller then reads
// live. A namespace that it found active before and that is gone now was
// deleted since: it reports it as being deleted (kcp deletes a workspace's
// namespace default only with the workspace; a teardown that comes late can
// find it gone already). A namespace found terminating is remembered for
// terminatingTTL, one found active for notTerminatingTTL, and that it was
// found active for existedTTL.
func (c *Client) NamespaceTerminating(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace string) (bool, error) {
	key := namespaceKey{cluster, namespace}
	if s, ok := c.remembered(key, c.now()); ok {
		return s.terminating, nil
	}
	// Callers that ask about one namespace through one export at once
	// share a probe (the clearer's workers, a teardown's items): it runs
	// on its own deadline, so a caller that gives up ends no other's.
	probe := c.probes.DoChan(src.Export.String()+"|"+cluster.String()+"|"+namespace, func() (any, error) {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
		defer cancel()
		return c.probeNamespace(pctx, src, key)
	})
	select {
	case <-ctx.Done():
		return false, fmt.Errorf("cannot tell whether namespace %s of logical cluster %s is being deleted: %w", namespace, cluster, ctx.Err())
	case r := <-probe:
		if r.Err != nil {
			return false, r.Err
		}
		return r.Val.(bool), nil
	}
}

// probeTimeout bounds a probe that NamespaceTerminating's callers share.
const probeTimeout = 10 * time.Second

// probeNamespace asks kcp whether the namespace of key is being deleted
// (see NamespaceTerminating) and remembers the answer.
func (c *Client) probeNamespace(ctx context.Context, src index.Source, key namespaceKey) (bool, error) {
	cluster, namespace := key.cluster, key.namespace
	now := c.now()
	body, err := probeEvent(namespace)
	if err != nil {
		return false, err
	}
	var terminating, answered bool
	err = c.router.OnShardOf(src, cluster, func(shard *vw.Client, _ index.State) error {
		err := shard.Create(ctx, eventsPath(cluster, namespace), url.Values{"dryRun": {metav1.DryRunAll}}, body)
		switch {
		case err == nil:
			answered = true
			return nil
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			terminating, answered = true, true
			return nil
		case namespaceGone(err, namespace) && c.existed(key, now):
			terminating, answered = true, true
			return nil
		}
		return err
	})
	if err == nil && !answered {
		err = fmt.Errorf("every shard refused a dry-run Event (does the APIExport %s claim events, has the workspace accepted the claim, and has its provider granted the webhook create on apiexports/content?)", src.Export)
	}
	if err != nil {
		return false, fmt.Errorf("cannot tell whether namespace %s of logical cluster %s is being deleted: %w", namespace, cluster, err)
	}
	c.lock.Lock()
	c.namespaces[key] = namespaceState{terminating: terminating, at: now}
	if !terminating {
		c.active[key] = now
	}
	c.lock.Unlock()
	log.FromContext(ctx).V(1).Info("Asked kcp whether a namespace is being deleted", "cluster", cluster, "namespace", namespace, "terminating", terminating)
	return terminating, nil
}

// remembered returns what NamespaceTerminating learned of key, if it is
// still valid at now, and now and then forgets what has expired.
func (c *Client) remembered(key namespaceKey, now time.Time) (namespaceState, bool) {
	c.lock.Lock()
	defer c.lock.Unlock()
	s, ok := c.namespaces[key]
	// Forgetting walks every answer: at most once a minute, as the
	// clearer asks once for every object it is about to clear.
	if now.Sub(c.swept) >= time.Minute {
		c.swept = now
		for k, old := range c.namespaces {
			if now.Sub(old.at) >= terminatingTTL {
				delete(c.namespaces, k)
			}
		}
	}
	return s, ok && now.Sub(s.at) < terminatingTTL && (s.terminating || now.Sub(s.at) < notTerminatingTTL)
}

// existed reports whether NamespaceTerminating found namespace key active
// within existedTTL before now, and forgets what has expired.
func (c *Client) existed(key namespaceKey, now time.Time) bool {
	c.lock.Lock()
	defer c.lock.Unlock()
	for k, at := range c.active {
		if now.Sub(at) >= existedTTL {
			delete(c.active, k)
		}
	}
	_, ok := c.active[key]
	return ok
}

// namespaceGone reports whether err says that namespace does not exist.
func namespaceGone(err error, namespace string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	details := status.Status().Details
	return details != nil && details.Kind == "namespaces" && details.Name == namespace
}

// probeEvent is the Event that NamespaceTerminating creates, as a dry run,
// in namespace.
func probeEvent(namespace string) ([]byte, error) {
	body, err := json.Marshal(corev1.Event{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "dependency-webhook-probe.", Namespace: namespace},
		// In the namespace: an Event whose involved object has no namespace
		// is valid only in the namespace default.
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: namespace, Namespace: namespace},
		Reason:         "Probe", Message: "a dry run: is the namespace being deleted?", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "dependency-webhook"},
	})
	if err != nil {
		return nil, fmt.Errorf("failed to encode the probe Event: %w", err)
	}
	return body, nil
}
