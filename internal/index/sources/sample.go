package sources

import (
	"context"
	"net/url"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// sampleTimeout bounds one sample of a shard's resourceVersion; a shard
// that does not answer within it is sampled again at the next tick.
const sampleTimeout = 10 * time.Second

// sample samples the current resourceVersion of the shard at shard, every
// Config.SampleInterval until ctx ends (with the shard's reflector): a
// consistent LIST of at most one object of the source's resource in all
// logical clusters, sent at t and served at R, is recorded in the store as
// (t, R) (see store.Sampled). Every write on the shard that returned before
// t has a resourceVersion of at most R, so once the reflector has passed
// R, the store holds all of them: t is then its currency (see
// store.Currency). A sample that fails is logged (at V(1)) and counted
// (Config.SampleFailed), and the next one is taken at the next tick.
func (w *Watch) sample(ctx context.Context, c *vw.Client, shard string) {
	logger := log.FromContext(ctx).WithValues("source", w.src.String(), "shard", shard).V(1)
	ticker := time.NewTicker(w.cfg.SampleInterval)
	defer ticker.Stop()
	path := vw.ResourcePath(logicalcluster.Wildcard, w.src.Resource, "")
	params := url.Values{"limit": {"1"}}
	for {
		sent := time.Now()
		sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
		rv, err := c.List(sctx, path, params, func([]byte) error { return nil })
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			logger.Info("Cannot sample the resourceVersion of the shard", "error", err)
			if w.cfg.SampleFailed != nil {
				w.cfg.SampleFailed(w.src)
			}
		default:
			w.store.Sampled(shard, sent, rv)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
