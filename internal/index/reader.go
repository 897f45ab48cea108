package index

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// reader reads one server (a shard's virtual workspace, or the front-proxy)
// with one client-go REST client: connections are reused, error responses
// become API errors, and nothing is rate limited on the client side, since
// reads are on the DELETE path. Lists and watches are streamed: memory per
// request is bounded by the largest single object, not by the number of
// objects.
type reader struct {
	client *rest.RESTClient
}

// newReader returns a reader for the server at base (without a /clusters/
// path) with the credentials of cfg.
func newReader(cfg *rest.Config, base string) (*reader, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Host = base
	cfg.APIPath = "/"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	c, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create REST client for %s: %w", base, err)
	}
	return &reader{client: c}, nil
}

// resourcePath returns the path of gvr in cluster (or all clusters for
// logicalcluster.Wildcard), in namespace if it is not empty.
func resourcePath(cluster logicalcluster.Path, gvr schema.GroupVersionResource, namespace string) []string {
	segments := []string{cluster.RequestPath(), "apis", gvr.Group, gvr.Version}
	if namespace != "" {
		segments = append(segments, "namespaces", namespace)
	}
	return append(segments, gvr.Resource)
}

// get sends a GET to the path and returns the body of a successful response.
func (r *reader) get(ctx context.Context, path []string, params url.Values) (io.ReadCloser, error) {
	// client-go's own retries would wait as long as a Retry-After says,
	// whatever the deadline; Retry waits within it.
	req := r.client.Get().AbsPath(path...).SetHeader("Accept", "application/json").MaxRetries(0)
	for k, vs := range params {
		for _, v := range vs {
			req = req.Param(k, v)
		}
	}
	return req.Stream(ctx)
}

// list lists the objects at path and calls visit with each item's raw JSON;
// the slice is only valid during the call. It returns the resourceVersion of
// the list.
func (r *reader) list(ctx context.Context, path []string, params url.Values, visit func(item []byte) error) (string, error) {
	body, err := r.get(ctx, path, params)
	if err != nil {
		return "", err
	}
	defer drain(body)
	return streamList(body, visit)
}

// drain reads what is left of a body (up to 1 MiB), so that the connection
// is reused, and closes it.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<20))
	_ = body.Close()
}

// streamList decodes a JSON list ({"kind":..., "metadata":{...},
// "items":[...]}) item by item and calls visit with each item's raw JSON. The
// buffer passed to visit is reused for the next item. It returns the
// resourceVersion of the list.
func streamList(r io.Reader, visit func(item []byte) error) (string, error) {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return "", err
	}
	var (
		rv   string
		item json.RawMessage
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("failed to decode list: %w", err)
		}
		switch key, _ := tok.(string); key {
		case "metadata":
			var meta metav1.ListMeta
			if err := dec.Decode(&meta); err != nil {
				return "", fmt.Errorf("failed to decode list metadata: %w", err)
			}
			rv = meta.ResourceVersion
			continue
		case "items":
		default:
			if err := dec.Decode(&item); err != nil { // skip apiVersion, kind
				return "", fmt.Errorf("failed to decode list: %w", err)
			}
			continue
		}
		tok, err = dec.Token()
		if err != nil {
			return "", fmt.Errorf("failed to decode list: %w", err)
		}
		if tok == nil { // "items": null
			continue
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return "", fmt.Errorf("failed to decode list: expected items to be a list, got %v", tok)
		}
		for dec.More() {
			// RawMessage.UnmarshalJSON reuses the slice, so items share one buffer.
			if err := dec.Decode(&item); err != nil {
				return "", fmt.Errorf("failed to decode list item: %w", err)
			}
			if err := visit(item); err != nil {
				return "", err
			}
		}
		if err := expectDelim(dec, ']'); err != nil {
			return "", err
		}
	}
	return rv, expectDelim(dec, '}')
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

// listWatch lists and watches one resource in all logical clusters of a
// shard's virtual workspace for a reflector, decoding objects itself: only
// the metadata and the strings at the source's paths are read from each
// object (see decodeObject). Errors are reported to onError before they are
// returned.
type listWatch struct {
	reader  *reader
	gvr     schema.GroupVersionResource
	paths   []fieldpath.Path
	onError func(error)
}

// ListWithContext implements cache.ListerWithContext.
func (lw *listWatch) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	list := &objectList{}
	params := url.Values{}
	if options.ResourceVersion != "" {
		params.Set("resourceVersion", options.ResourceVersion)
	}
	if options.ResourceVersionMatch != "" {
		params.Set("resourceVersionMatch", string(options.ResourceVersionMatch))
	}
	rv, err := lw.reader.list(ctx, resourcePath(logicalcluster.Wildcard, lw.gvr, ""), params, func(item []byte) error {
		o, err := decodeObject(item, lw.paths)
		if err != nil {
			return err
		}
		list.Items = append(list.Items, *o)
		return nil
	})
	if err != nil {
		lw.onError(err)
		return nil, err
	}
	list.ResourceVersion = rv
	return list, nil
}

// List implements cache.Lister.
func (lw *listWatch) List(options metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), options)
}

// WatchWithContext implements cache.WatcherWithContext.
func (lw *listWatch) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	params := url.Values{"watch": {"true"}, "resourceVersion": {options.ResourceVersion}}
	if options.AllowWatchBookmarks {
		params.Set("allowWatchBookmarks", "true")
	}
	if options.TimeoutSeconds != nil {
		params.Set("timeoutSeconds", strconv.FormatInt(*options.TimeoutSeconds, 10))
	}
	body, err := lw.reader.get(ctx, resourcePath(logicalcluster.Wildcard, lw.gvr, ""), params)
	if err != nil {
		lw.onError(err)
		return nil, err
	}
	decoder := &eventDecoder{body: body, dec: json.NewDecoder(body), paths: lw.paths, onError: lw.onError}
	return watch.NewStreamWatcher(decoder, apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")), nil
}

// Watch implements cache.Watcher.
func (lw *listWatch) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), options)
}

// IsWatchListSemanticsUnSupported tells the reflector to list and then watch:
// the objects are decoded here, not by client-go.
func (lw *listWatch) IsWatchListSemanticsUnSupported() bool {
	return true
}

// eventDecoder decodes a stream of watch events into objects.
type eventDecoder struct {
	body    io.ReadCloser
	dec     *json.Decoder
	paths   []fieldpath.Path
	onError func(error)
}

// Decode implements watch.Decoder.
func (d *eventDecoder) Decode() (watch.EventType, runtime.Object, error) {
	var ev struct {
		Type   watch.EventType `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := d.dec.Decode(&ev); err != nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) {
			d.onError(err)
		}
		return "", nil, err
	}
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		o, err := decodeObject(ev.Object, d.paths)
		if err != nil {
			d.onError(err)
			return "", nil, err
		}
		return ev.Type, o, nil
	case watch.Error:
		status := &metav1.Status{}
		if err := json.Unmarshal(ev.Object, status); err != nil {
			return "", nil, fmt.Errorf("failed to decode watch error: %w", err)
		}
		d.onError(apierrors.FromObject(status))
		return ev.Type, status, nil
	default:
		return "", nil, fmt.Errorf("unexpected watch event type %q", ev.Type)
	}
}

// Close implements watch.Decoder.
func (d *eventDecoder) Close() {
	drain(d.body)
}
