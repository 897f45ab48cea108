// Package dependents lists the objects that may reference a protected object:
// all objects of a dependent type in a consumer workspace, streamed as raw
// JSON so that the caller decodes only what it needs.
package dependents

// The webhook lists dependents of any type in any workspace on every shard.
// kcp reads this role from each shard's system:admin workspace; it is bound
// there per shard (config/rbac/webhook-shard).
//
// +kubebuilder:rbac:urls=/,verbs=access
// +kubebuilder:rbac:groups=*,resources=*,verbs=get;list

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"
)

// ErrNotServed is returned (wrapped) by a Lister when the resource
// is not served in the logical cluster at the requested scope: the type is
// not bound there, or it is cluster-scoped and a namespace was given.
var ErrNotServed = errors.New("resource not served")

// Lister lists the objects of one resource type in a logical
// cluster and hands each to visit as raw JSON, without decoding it. The
// slice passed to visit is only valid during the call.
type Lister interface {
	// List lists gvr in cluster: in namespace if it is not empty, otherwise
	// across the cluster (all namespaces of a namespaced type).
	List(ctx context.Context, cluster logicalcluster.Name, gvr schema.GroupVersionResource, namespace string, visit func(obj []byte) error) error
}

// HTTPLister lists through a kcp server (usually the front-proxy, which
// routes each logical cluster to its shard) with one HTTP client for all
// requests, so connections are reused. It streams the response: memory per
// request is bounded by the largest single object, not by the number of
// objects.
type HTTPLister struct {
	base   string
	client *http.Client
}

// NewHTTPLister returns a lister for the server at base (without a
// /clusters/ path), sending requests with client.
func NewHTTPLister(base string, client *http.Client) *HTTPLister {
	return &HTTPLister{base: strings.TrimSuffix(base, "/"), client: client}
}

// List implements Lister.
func (l *HTTPLister) List(ctx context.Context, cluster logicalcluster.Name, gvr schema.GroupVersionResource, namespace string, visit func(obj []byte) error) error {
	u := l.base + cluster.Path().RequestPath() + "/apis/" + url.PathEscape(gvr.Group) + "/" + url.PathEscape(gvr.Version)
	if namespace != "" {
		u += "/namespaces/" + url.PathEscape(namespace)
	}
	u += "/" + url.PathEscape(gvr.Resource)

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		return err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused
		_ = resp.Body.Close()
	}()

	if resp.StatusCode != http.StatusOK {
		return responseError(resp, gvr)
	}
	return StreamItems(resp.Body, visit)
}

// responseError turns a non-200 response into an API error; 404 wraps
// ErrNotServed.
func responseError(resp *http.Response, gvr schema.GroupVersionResource) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	status := &metav1.Status{}
	if err := json.Unmarshal(body, status); err != nil || status.Kind != "Status" {
		status = &metav1.Status{
			Status: metav1.StatusFailure, Code: int32(resp.StatusCode),
			Message: fmt.Sprintf("unexpected response %s: %s", resp.Status, bytes.TrimSpace(body)),
		}
	}
	err := &apierrors.StatusError{ErrStatus: *status}
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %s: %w", ErrNotServed, gvr.GroupResource(), err)
	}
	return err
}

// StreamItems decodes a JSON list ({"kind":..., "items":[...]}) item by item
// and calls visit with each item's raw JSON. The buffer passed to visit is
// reused for the next item.
func StreamItems(r io.Reader, visit func(obj []byte) error) error {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	var item json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("failed to decode list: %w", err)
		}
		if key, _ := tok.(string); key != "items" {
			if err := dec.Decode(&item); err != nil { // skip apiVersion, kind, metadata
				return fmt.Errorf("failed to decode list: %w", err)
			}
			continue
		}
		tok, err = dec.Token()
		if err != nil {
			return fmt.Errorf("failed to decode list: %w", err)
		}
		if tok == nil { // "items": null
			continue
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return fmt.Errorf("failed to decode list: expected items to be a list, got %v", tok)
		}
		for dec.More() {
			// RawMessage.UnmarshalJSON reuses the slice, so items share one buffer.
			if err := dec.Decode(&item); err != nil {
				return fmt.Errorf("failed to decode list item: %w", err)
			}
			if err := visit(item); err != nil {
				return err
			}
		}
		if err := expectDelim(dec, ']'); err != nil {
			return err
		}
	}
	return expectDelim(dec, '}')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("failed to decode list: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("failed to decode list: expected %q, got %v", want, tok)
	}
	return nil
}
