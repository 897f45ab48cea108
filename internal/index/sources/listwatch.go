package sources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// listWatch lists and watches one resource in all logical clusters of a
// shard's virtual workspace for a reflector, decoding objects itself: only
// the metadata and the strings at the source's paths are read from each
// object (see store.Decode). Errors are reported to onError before they are
// returned, and onWatching is called whenever a watch has started.
type listWatch struct {
	client *vw.Client
	gvr    schema.GroupVersionResource
	paths  []fieldpath.Reference
	// labelSelector, if set, selects the objects listed and watched.
	labelSelector string
	// timeout, if set, replaces the timeout the reflector asks a watch for
	// (see timeoutSeconds).
	timeout    time.Duration
	onError    func(error)
	onWatching func()
}

// timeoutSeconds returns the timeout of a watch, in seconds: the
// reflector's, or, if lw.timeout is set, a random one between it and half
// again as long (at least 1 s), so that the watches of many sources do not
// end together. kube's watch cache sends a watch that asked for bookmarks
// one 2 s before its timeout (and otherwise every minute), and the
// reflector then watches again from where it was: with a short timeout the
// store's progress follows the shard's resourceVersion every few seconds,
// however quiet the resource. client-go's own option for it
// (ReflectorOptions.MinWatchTimeout) honours no value below 5 minutes.
func (lw *listWatch) timeoutSeconds(reflector *int64) *int64 {
	if lw.timeout <= 0 {
		return reflector
	}
	secs := max(int64(lw.timeout.Seconds()*(1+rand.Float64()/2)), 1)
	return &secs
}

// ListWithContext implements cache.ListerWithContext.
func (lw *listWatch) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	list := &store.ObjectList{}
	params := url.Values{}
	if options.ResourceVersion != "" {
		params.Set("resourceVersion", options.ResourceVersion)
	}
	if options.ResourceVersionMatch != "" {
		params.Set("resourceVersionMatch", string(options.ResourceVersionMatch))
	}
	if lw.labelSelector != "" {
		params.Set("labelSelector", lw.labelSelector)
	}
	rv, err := lw.client.List(ctx, vw.ResourcePath(logicalcluster.Wildcard, lw.gvr, ""), params, func(item []byte) error {
		o, err := store.Decode(item, lw.paths)
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
	if timeout := lw.timeoutSeconds(options.TimeoutSeconds); timeout != nil {
		params.Set("timeoutSeconds", strconv.FormatInt(*timeout, 10))
	}
	if lw.labelSelector != "" {
		params.Set("labelSelector", lw.labelSelector)
	}
	body, err := lw.client.Get(ctx, vw.ResourcePath(logicalcluster.Wildcard, lw.gvr, ""), params)
	if err != nil {
		lw.onError(err)
		return nil, err
	}
	if lw.onWatching != nil {
		lw.onWatching()
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
	paths   []fieldpath.Reference
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
		o, err := store.Decode(ev.Object, d.paths)
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

// Close implements watch.Decoder. It closes the stream without reading
// what is left of it: a watch has no end to read to, and reading would
// hold the reflector (and the stopped watch's goroutines) until kcp ends
// the watch.
func (d *eventDecoder) Close() {
	_ = d.body.Close()
}
