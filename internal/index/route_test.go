package index

import (
	"context"
	"errors"
	"testing"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// Requests for objects of a source are routed to the shard that serves the
// workspace: once a request went through a shard, the shard is known and
// named first.
func TestRouting(t *testing.T) {
	shard1 := &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`}}
	shard2 := &fakeShard{clusters: map[string]string{"c2": `{"items":[]}`}}
	ix, w := routedIndex(t, true, Options{}, shard1, shard2)
	if _, known, err := ix.Serving(testSource, "c2"); known || err != nil {
		t.Errorf("Serving(c2) before any request = %v, %v; want not known", known, err)
	}
	var tried []string
	err := ix.OnShardOf(testSource, "c2", func(c *vw.Client, _ State) error {
		tried = append(tried, c.URL())
		_, err := c.List(context.Background(), vw.ResourcePath(logicalcluster.NewPath("c2"), testSource.Resource, ""), nil, func([]byte) error { return nil })
		return err
	})
	if err != nil || len(tried) != 2 || tried[1] != w.urls[1] {
		t.Fatalf("OnShardOf(c2) tried %v: %v; want both shards, the second last", tried, err)
	}
	c, known, err := ix.Serving(testSource, "c2")
	if err != nil || !known || c.URL() != w.urls[1] {
		t.Errorf("Serving(c2) after a request = %v, %v; want the second shard", known, err)
	}
	shards, err := ix.Shards(testSource, "c2")
	if err != nil || len(shards) != 2 || shards[0].URL() != w.urls[1] {
		t.Errorf("Shards(c2) = %v, %v; want the second shard first", shards, err)
	}
	// A workspace no shard serves binds no export: nothing is done.
	if err := ix.OnShardOf(testSource, "c3", func(*vw.Client, State) error { return nil }); err != nil {
		t.Errorf("OnShardOf(c3) = %v", err)
	}
	// Before the export is read, nothing is routed, and that is retried.
	unread, _ := routedIndex(t, false, Options{}, shard1)
	if _, err := unread.Shards(testSource, ""); !errors.Is(err, ErrNotInspected) {
		t.Errorf("Shards() of an export not read yet = %v", err)
	}
	if cause, retry := RetryCause(unread.OnShardOf(testSource, "c1", func(*vw.Client, State) error { return nil })); !retry || cause != CauseNotInspected {
		t.Errorf("OnShardOf() of an export not read yet: cause %q, retried %v", cause, retry)
	}
}
