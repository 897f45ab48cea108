package vw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/kcp-dev/logicalcluster/v3"
)

// Client sends raw requests to one server (a shard's virtual workspace)
// with one client-go REST client: it reads (GET, streamed LIST) and makes
// the few writes of the webhook (PATCH, POST, DELETE). Connections are
// reused, error responses become API errors, and nothing is rate limited on
// the client side, since reads are on the admission path. Lists are
// streamed: memory per request is bounded by the largest single object, not
// by the number of objects. Bodies are returned raw, so that callers decode
// only what they need.
type Client struct {
	base   string
	client *rest.RESTClient
}

// NewClient returns a client of the server at base (without a /clusters/
// path) with the credentials of cfg.
func NewClient(cfg *rest.Config, base string) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Host = base
	cfg.APIPath = "/"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	c, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create REST client for %s: %w", base, err)
	}
	return &Client{base: base, client: c}, nil
}

// URL returns the base URL of the server.
func (c *Client) URL() string {
	return c.base
}

// Clients keeps one Client per server URL, all with the same credentials.
type Clients struct {
	cfg *rest.Config

	lock    sync.Mutex
	clients map[string]*Client
}

// NewClients returns Clients with the credentials of cfg.
func NewClients(cfg *rest.Config) *Clients {
	return &Clients{cfg: rest.CopyConfig(cfg), clients: map[string]*Client{}}
}

// For returns the client of the server at url.
func (cs *Clients) For(url string) (*Client, error) {
	cs.lock.Lock()
	defer cs.lock.Unlock()
	if c, ok := cs.clients[url]; ok {
		return c, nil
	}
	c, err := NewClient(cs.cfg, url)
	if err != nil {
		return nil, err
	}
	cs.clients[url] = c
	return c, nil
}

// ResourcePath returns the path of gvr in cluster (or all clusters for
// logicalcluster.Wildcard), in namespace if it is not empty.
func ResourcePath(cluster logicalcluster.Path, gvr schema.GroupVersionResource, namespace string) []string {
	segments := []string{cluster.RequestPath(), "apis", gvr.Group, gvr.Version}
	if namespace != "" {
		segments = append(segments, "namespaces", namespace)
	}
	return append(segments, gvr.Resource)
}

// Get sends a GET to the path and returns the body of a successful response,
// which the caller closes with Drain.
func (c *Client) Get(ctx context.Context, path []string, params url.Values) (io.ReadCloser, error) {
	// client-go's own retries would wait as long as a Retry-After says,
	// whatever the deadline; callers retry within theirs.
	req := c.client.Get().AbsPath(path...).SetHeader("Accept", "application/json").MaxRetries(0)
	for k, vs := range params {
		for _, v := range vs {
			req = req.Param(k, v)
		}
	}
	return req.Stream(ctx)
}

// List lists the objects at path and calls visit with each item's raw JSON;
// the slice is only valid during the call. It returns the resourceVersion of
// the list.
func (c *Client) List(ctx context.Context, path []string, params url.Values, visit func(item []byte) error) (string, error) {
	body, err := c.Get(ctx, path, params)
	if err != nil {
		return "", err
	}
	defer Drain(body)
	return StreamList(body, visit)
}

// ListPage lists one page of the objects at path, as params say (limit,
// continue), and calls visit with each item's raw JSON, as List does. It
// returns the list's metadata: its resourceVersion, and the continue token
// of the next page (empty after the last).
func (c *Client) ListPage(ctx context.Context, path []string, params url.Values, visit func(item []byte) error) (metav1.ListMeta, error) {
	body, err := c.Get(ctx, path, params)
	if err != nil {
		return metav1.ListMeta{}, err
	}
	defer Drain(body)
	return streamListMeta(body, visit)
}

// Patch sends a PATCH of type pt with body to the path, with params, and
// returns the object it answers with (the patched object).
func (c *Client) Patch(ctx context.Context, path []string, pt types.PatchType, body []byte, params ...url.Values) ([]byte, error) {
	req := c.client.Patch(pt).AbsPath(path...).Body(body).MaxRetries(0)
	for _, p := range params {
		for k, vs := range p {
			for _, v := range vs {
				req = req.Param(k, v)
			}
		}
	}
	res := req.Do(ctx)
	raw, err := res.Raw()
	if err != nil {
		// Error decodes the Status that the server answered, with its
		// message (a webhook's denial, say); Raw's error has only the code.
		return nil, res.Error()
	}
	return raw, nil
}

// Create sends a POST of the JSON object body to the path (a collection),
// with params. Only the outcome is returned.
func (c *Client) Create(ctx context.Context, path []string, params url.Values, body []byte) error {
	req := c.client.Post().AbsPath(path...).SetHeader("Content-Type", "application/json").Body(body).MaxRetries(0)
	for k, vs := range params {
		for _, v := range vs {
			req = req.Param(k, v)
		}
	}
	return req.Do(ctx).Error()
}

// Post sends a POST of the JSON object body to the path and returns what
// it answers: for a review (a SubjectAccessReview), the review with its
// status.
func (c *Client) Post(ctx context.Context, path []string, body []byte) ([]byte, error) {
	return c.client.Post().AbsPath(path...).SetHeader("Content-Type", "application/json").Body(body).MaxRetries(0).Do(ctx).Raw()
}

// Delete sends a DELETE with opts to the path. Only the outcome is
// returned.
func (c *Client) Delete(ctx context.Context, path []string, opts metav1.DeleteOptions) error {
	opts.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"}
	body, err := json.Marshal(opts)
	if err != nil {
		return fmt.Errorf("failed to encode the delete options: %w", err)
	}
	return c.client.Delete().AbsPath(path...).SetHeader("Content-Type", "application/json").Body(body).MaxRetries(0).Do(ctx).Error()
}

// Drain reads what is left of a body (up to 1 MiB), so that the connection
// is reused, and closes it.
func Drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<20))
	_ = body.Close()
}

// StreamList decodes a JSON list ({"kind":..., "metadata":{...},
// "items":[...]}) item by item and calls visit with each item's raw JSON. The
// buffer passed to visit is reused for the next item. It returns the
// resourceVersion of the list.
func StreamList(r io.Reader, visit func(item []byte) error) (string, error) {
	meta, err := streamListMeta(r, visit)
	return meta.ResourceVersion, err
}

// streamListMeta is StreamList, returning the list's metadata.
func streamListMeta(r io.Reader, visit func(item []byte) error) (metav1.ListMeta, error) {
	meta, err := streamList(r, visit)
	if errors.Is(err, io.EOF) {
		// The body ended before the list did: a connection cut off
		// mid-stream, which is worth a retry (see RetryCause).
		return metav1.ListMeta{}, fmt.Errorf("%w: %w", io.ErrUnexpectedEOF, err)
	}
	return meta, err
}

func streamList(r io.Reader, visit func(item []byte) error) (metav1.ListMeta, error) {
	var (
		list metav1.ListMeta
		item json.RawMessage
	)
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return list, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return metav1.ListMeta{}, fmt.Errorf("failed to decode list: %w", err)
		}
		switch key, _ := tok.(string); key {
		case "metadata":
			if err := dec.Decode(&list); err != nil {
				return metav1.ListMeta{}, fmt.Errorf("failed to decode list metadata: %w", err)
			}
			continue
		case "items":
		default:
			if err := dec.Decode(&item); err != nil { // skip apiVersion, kind
				return metav1.ListMeta{}, fmt.Errorf("failed to decode list: %w", err)
			}
			continue
		}
		tok, err = dec.Token()
		if err != nil {
			return metav1.ListMeta{}, fmt.Errorf("failed to decode list: %w", err)
		}
		if tok == nil { // "items": null
			continue
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return metav1.ListMeta{}, fmt.Errorf("failed to decode list: expected items to be a list, got %v", tok)
		}
		for dec.More() {
			// RawMessage.UnmarshalJSON reuses the slice, so items share one buffer.
			if err := dec.Decode(&item); err != nil {
				return metav1.ListMeta{}, fmt.Errorf("failed to decode list item: %w", err)
			}
			if err := visit(item); err != nil {
				return metav1.ListMeta{}, err
			}
		}
		if err := expectDelim(dec, ']'); err != nil {
			return metav1.ListMeta{}, err
		}
	}
	return list, expectDelim(dec, '}')
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
