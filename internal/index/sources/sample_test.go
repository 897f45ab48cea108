package sources

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// revisionShard serves the virtual workspace of one shard whose etcd is at
// a revision that moves: a list of its dependents at the revision it was
// set to, LISTs of at most one object at the current revision (the
// samples), and watches that send what events carries.
type revisionShard struct {
	revision atomic.Int64
	// sampleRV, if set, is the resourceVersion samples are answered with;
	// sampleStatus, if set, the status they fail with.
	sampleRV     atomic.Value
	sampleStatus atomic.Int32
	events       chan string

	lock    sync.Mutex
	samples []url.Values
	watches []url.Values
}

func newRevisionShard(rv int64) *revisionShard {
	s := &revisionShard{events: make(chan string)}
	s.revision.Store(rv)
	s.sampleRV.Store("")
	return s
}

func (s *revisionShard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if r.URL.Path != "/clusters/*/apis/compute.io/v1/virtualmachines" {
		http.NotFound(w, r)
		return
	}
	switch {
	case q.Get("watch") == "true":
		s.lock.Lock()
		s.watches = append(s.watches, q)
		s.lock.Unlock()
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case ev := <-s.events:
				fmt.Fprintln(w, ev)
				w.(http.Flusher).Flush()
			}
		}
	case q.Get("limit") == "1":
		s.lock.Lock()
		s.samples = append(s.samples, q)
		s.lock.Unlock()
		if code := s.sampleStatus.Load(); code != 0 {
			status(int(code))(w)
			return
		}
		rv := s.sampleRV.Load().(string)
		if rv == "" {
			rv = strconv.FormatInt(s.revision.Load(), 10)
		}
		fmt.Fprintf(w, `{"kind":"VirtualMachineList","metadata":{"resourceVersion":%q,"continue":"x"},"items":[%s]}`, rv, vmItem("c1", "vm-0", "vpc-a"))
	default:
		fmt.Fprintf(w, `{"kind":"VirtualMachineList","metadata":{"resourceVersion":"%d"},"items":[%s]}`, s.revision.Load(), vmItem("c1", "vm-0", "vpc-a"))
	}
}

func status(code int) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"boom","code":%d}`, code)
	}
}

func (s *revisionShard) sampled() []url.Values {
	s.lock.Lock()
	defer s.lock.Unlock()
	return append([]url.Values(nil), s.samples...)
}

func (s *revisionShard) watched() []url.Values {
	s.lock.Lock()
	defer s.lock.Unlock()
	return append([]url.Values(nil), s.watches...)
}

// send sends an event to the shard's watch.
func (s *revisionShard) send(t *testing.T, event string) {
	t.Helper()
	select {
	case s.events <- event:
	case <-time.After(10 * time.Second):
		t.Fatal("no watch took the event")
	}
}

// startShard runs a watch with the given config on one shard, and returns
// it with the shard's URL; the watch stops at the end of the test.
func startShard(t *testing.T, shard http.Handler, cfg Config) (*Watch, string) {
	t.Helper()
	srv := httptest.NewServer(shard)
	t.Cleanup(srv.Close)
	cfg.Clients, cfg.PollInterval = vw.NewClients(&rest.Config{}), time.Second
	if cfg.Notify == nil {
		cfg.Notify = func() {}
	}
	w := NewWatch(testSource, []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w.lock.Lock()
	w.ensureShards(ctx, []string{srv.URL}, true)
	w.state = w.shardState(State{Phase: PhaseSyncing, Shards: 1})
	w.lock.Unlock()
	t.Cleanup(func() {
		w.lock.Lock()
		w.ensureShards(ctx, nil, false)
		w.lock.Unlock()
	})
	return w, srv.URL
}

// The currency of a shard follows the shard's revision: samples are
// consistent LISTs of at most one object in all clusters, which count once
// the reflector has passed their revision, with an event (a busy resource)
// or a bookmark (a quiet one). The watches ask for short timeouts and for
// bookmarks, and the sampler stops with the reflector.
func TestCurrencyFollowsTheShard(t *testing.T) {
	shard := newRevisionShard(10)
	w, u := startShard(t, shard, Config{SampleInterval: 10 * time.Millisecond, WatchTimeout: 5 * time.Second})
	st := w.Store()
	waitFor(t, func() bool { _, ok := st.Currency(u); return ok && w.ShardSynced(u) })
	waitFor(t, func() bool { return len(shard.watched()) > 0 })
	for _, q := range shard.sampled() {
		if len(q) != 1 || q.Get("limit") != "1" {
			t.Errorf("sample query %v, want a consistent LIST of one object (no resourceVersion)", q)
		}
	}
	q := shard.watched()[0]
	if timeout, err := strconv.Atoi(q.Get("timeoutSeconds")); err != nil || timeout < 5 || timeout > 7 || q.Get("allowWatchBookmarks") != "true" {
		t.Errorf("watch query %v, want bookmarks and a timeout of 5 to 7 s", q)
	}

	// Quiet: the shard's revision moves on (other resources were
	// written), and nothing of this one changes: the samples now name a
	// revision the reflector has not passed.
	shard.revision.Store(20)
	moved := time.Now() // samples sent later are answered at 20
	n := len(shard.sampled())
	waitFor(t, func() bool { return len(shard.sampled()) > n+3 })
	if c, ok := st.Currency(u); !ok || c.After(moved) {
		t.Errorf("quiet: Currency() = %s, %v; want at most %s", c, ok, moved)
	}
	// A bookmark passes them.
	shard.send(t, `{"type":"BOOKMARK","object":{"kind":"VirtualMachine","metadata":{"resourceVersion":"20"}}}`)
	waitFor(t, func() bool { c, _ := st.Currency(u); return c.After(moved) })
	if rv, _, _ := st.Progress(u); rv != 20 {
		t.Errorf("after a bookmark at 20: Progress() = %d", rv)
	}

	// Busy: an event of the resource passes them too, and what it carries
	// is stored.
	shard.revision.Store(30)
	moved = time.Now()
	n = len(shard.sampled())
	waitFor(t, func() bool { return len(shard.sampled()) > n+1 })
	shard.send(t, `{"type":"ADDED","object":{"metadata":{"name":"vm-1","namespace":"default","resourceVersion":"30",
		"labels":{"dependencies.opendefense.cloud/admission":"0123456789abcdef"},"annotations":{"kcp.io/cluster":"c1"}},"spec":{"vpc":"vpc-b"}}}`)
	waitFor(t, func() bool { c, _ := st.Currency(u); return c.After(moved) })
	if _, ok := st.Admitted("0123456789abcdef"); !ok || len(st.Referencing("c1", []int{0}, "", "vpc-b")) != 1 {
		t.Error("the event's dependent or its admission id is not in the store")
	}

	// The sampler stops with the shard's reflector.
	w.lock.Lock()
	w.ensureShards(context.Background(), nil, false)
	w.lock.Unlock()
	time.Sleep(30 * time.Millisecond)
	n = len(shard.sampled())
	time.Sleep(50 * time.Millisecond)
	if got := len(shard.sampled()); got != n {
		t.Errorf("%d samples after the shard's reflector stopped", got-n)
	}
	if _, ok := st.Currency(u); ok || w.ShardSynced(u) {
		t.Error("a shard whose reflector stopped has a currency, or is synced")
	}
}

// A sample that fails is counted and the next one is taken; one whose
// resourceVersion is not a number is ignored; without an interval nothing
// is sampled.
func TestSamplesThatFail(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		rv         string
		interval   time.Duration
		wantFailed bool
	}{
		{name: "refused", status: http.StatusForbidden, interval: 10 * time.Millisecond, wantFailed: true},
		{name: "unavailable", status: http.StatusServiceUnavailable, interval: 10 * time.Millisecond, wantFailed: true},
		{name: "not a number", rv: "abc", interval: 10 * time.Millisecond},
		{name: "no interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shard := newRevisionShard(10)
			shard.sampleStatus.Store(int32(tt.status))
			shard.sampleRV.Store(tt.rv)
			var failed atomic.Int32
			w, u := startShard(t, shard, Config{SampleInterval: tt.interval, SampleFailed: func(src Source) {
				if src != testSource {
					t.Errorf("a failed sample of %s", src)
				}
				failed.Add(1)
			}})
			waitFor(t, func() bool { return w.ShardSynced(u) })
			if tt.interval > 0 {
				waitFor(t, func() bool { return len(shard.sampled()) >= 3 })
			} else {
				time.Sleep(50 * time.Millisecond)
				if n := len(shard.sampled()); n != 0 {
					t.Errorf("%d samples without an interval", n)
				}
			}
			if got := failed.Load() >= 2; got != tt.wantFailed {
				t.Errorf("%d failed samples counted", failed.Load())
			}
			if _, ok := w.Store().Currency(u); ok {
				t.Error("a currency without a sample")
			}
		})
	}
}

// Without a watch timeout the reflector's stands; with one, each watch
// asks for between it and half again as long.
func TestWatchTimeout(t *testing.T) {
	reflector := int64(400)
	tests := []struct {
		timeout  time.Duration
		min, max int64
	}{
		{0, 400, 400},
		{5 * time.Second, 5, 7},
		{time.Minute, 60, 90},
		{time.Millisecond, 1, 1},
	}
	for _, tt := range tests {
		lw := &listWatch{timeout: tt.timeout}
		for range 100 {
			if got := *lw.timeoutSeconds(&reflector); got < tt.min || got > tt.max {
				t.Fatalf("timeout %s: %d s, want %d to %d", tt.timeout, got, tt.min, tt.max)
			}
		}
	}
	if got := (&listWatch{timeout: time.Second}).timeoutSeconds(nil); got == nil || *got != 1 {
		t.Errorf("without a timeout from the reflector: %v", got)
	}
	if got := (&listWatch{}).timeoutSeconds(nil); got != nil {
		t.Errorf("with neither: %v", *got)
	}
}
