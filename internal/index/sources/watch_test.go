package sources

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

var testSource = Source{Export: kcp.ObjectKey{Cluster: "provider", Name: "compute.io"}, Resource: vms}

// A state that takes protection away applies only once inspections agree
// on it shrinkConfirmations times in a row, spanning the poll intervals
// between them; anything else applies at once.
func TestConfirmShrink(t *testing.T) {
	const poll = 10 * time.Second
	urls := []string{"https://shard-1", "https://shard-2"}
	type step struct {
		after time.Duration
		state State
		urls  []string
		apply bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"an effective state applies at once", []step{
			{0, State{Phase: PhaseSyncing}, urls, true},
		}},
		{"an undetermined inspection changes nothing and applies", []step{
			{0, State{}, nil, true},
		}},
		{"access denied applies on the third inspection in a row", []step{
			{0, State{Phase: PhaseAccessDenied}, nil, false},
			{poll, State{Phase: PhaseAccessDenied}, nil, false},
			{2 * poll, State{Phase: PhaseAccessDenied}, nil, true},
		}},
		{"a transient 403 during a restart never applies", []step{
			{0, State{Phase: PhaseAccessDenied}, nil, false},
			{poll, State{Phase: PhaseSyncing}, urls, true},
			{2 * poll, State{Phase: PhaseAccessDenied}, nil, false},
			{3 * poll, State{Phase: PhaseExportNotFound}, nil, false},
		}},
		{"an undetermined inspection does not confirm a pending state", []step{
			{0, State{Phase: PhaseAccessDenied}, nil, false},
			{poll, State{}, nil, true},
			{2 * poll, State{Phase: PhaseAccessDenied}, nil, false},
		}},
		{"three inspections in quick succession are not enough", []step{
			{0, State{Phase: PhaseResourceNotExported}, nil, false},
			{time.Second, State{Phase: PhaseResourceNotExported}, nil, false},
			{2 * time.Second, State{Phase: PhaseResourceNotExported}, nil, false},
			{2 * poll, State{Phase: PhaseResourceNotExported}, nil, true},
		}},
		{"a shard dropped from the endpoint slice is confirmed too", []step{
			{0, State{Phase: PhaseSyncing}, urls[:1], false},
			{poll, State{Phase: PhaseSyncing}, urls[:1], false},
			{2 * poll, State{Phase: PhaseSyncing}, urls[:1], true},
		}},
		{"a shard dropped for another is confirmed too", []step{
			{0, State{Phase: PhaseSyncing}, []string{"https://shard-1", "https://shard-3"}, false},
			{poll, State{Phase: PhaseSyncing}, []string{"https://shard-1", "https://shard-3"}, false},
			{2 * poll, State{Phase: PhaseSyncing}, []string{"https://shard-1", "https://shard-3"}, true},
		}},
		{"a version not served keeps the rules in effect and applies at once", []step{
			{0, State{Phase: PhaseVersionNotServed}, urls, true},
		}},
		{"a shard added applies at once", []step{
			{0, State{Phase: PhaseSyncing}, append(slices.Clone(urls), "https://shard-3"), true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &Watch{cfg: Config{PollInterval: poll}, urls: urls}
			start := time.Now()
			for i, s := range tt.steps {
				if got := w.confirmShrink(s.state, s.urls, start.Add(s.after)); got != s.apply {
					t.Errorf("step %d (%s after %s): confirmShrink() = %v, want %v", i, s.state.Phase, s.after, got, s.apply)
				}
			}
		})
	}
}

// Shards names first the shard on which the dependents of a cluster were
// indexed, else the one through which it was last read, and tells whether
// the export has been read at all.
func TestShardsNamesTheShardOfTheClusterFirst(t *testing.T) {
	w := NewWatch(testSource, []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}, Config{PollInterval: time.Second})
	if urls, inspected := w.Shards("c1"); inspected || len(urls) != 0 {
		t.Errorf("before the export was read: Shards() = %v, %v", urls, inspected)
	}
	w.urls, w.inspected = []string{"https://shard-1", "https://shard-2", "https://shard-3"}, true
	if urls, inspected := w.Shards("c1"); !inspected || !slices.Equal(urls, w.urls) {
		t.Errorf("a cluster the watch knows nothing of: Shards() = %v, %v", urls, inspected)
	}
	w.ReadThrough("c1", "https://shard-3")
	if urls, _ := w.Shards("c1"); !slices.Equal(urls, []string{"https://shard-3", "https://shard-2", "https://shard-1"}) {
		t.Errorf("after a read through shard-3: Shards() = %v", urls)
	}
	if urls, _ := w.Shards("c2"); !slices.Equal(urls, w.urls) {
		t.Errorf("another cluster: Shards() = %v", urls)
	}
	if err := w.Store().ForShard("https://shard-2", func() {}).Add(&store.Object{Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	if urls, _ := w.Shards("c1"); urls[0] != "https://shard-2" || len(urls) != 3 {
		t.Errorf("with dependents indexed on shard-2: Shards() = %v", urls)
	}
	// A shard that the export no longer names is not read.
	w.ReadThrough("c2", "https://shard-9")
	if urls, _ := w.Shards("c2"); !slices.Equal(urls, w.urls) {
		t.Errorf("with a hint the export does not name: Shards() = %v", urls)
	}
	// The caller's slice is its own.
	urls, _ := w.Shards("c1")
	urls[0] = "changed"
	if !slices.Equal(w.urls, []string{"https://shard-1", "https://shard-2", "https://shard-3"}) {
		t.Errorf("Shards() returned the watch's own slice: %v", w.urls)
	}
	if urls, _ := w.Shards("c1"); urls[0] != "https://shard-2" {
		t.Errorf("Shards() after the caller changed its result = %v", urls)
	}
}

// fakeVW serves the virtual workspace of one shard: a list of its
// dependents, and watches that stay open until the reflector stops them.
type fakeVW struct {
	items   string
	lists   atomic.Int32
	watches atomic.Int32

	lock sync.Mutex
	// selectors are the label selectors of the requests served, as
	// "list <selector>" and "watch <selector>"; timeouts the timeouts
	// that the watches asked for, in seconds.
	selectors []string
	timeouts  []int
}

// watchTimeouts returns the timeouts that the watches asked for.
func (s *fakeVW) watchTimeouts() []int {
	s.lock.Lock()
	defer s.lock.Unlock()
	return slices.Clone(s.timeouts)
}

// selected reports whether every request served had the label selector
// want, and whether there were a list and a watch among them.
func (s *fakeVW) selected(want string) bool {
	s.lock.Lock()
	defer s.lock.Unlock()
	for _, sel := range s.selectors {
		if sel != "list "+want && sel != "watch "+want {
			return false
		}
	}
	return slices.Contains(s.selectors, "list "+want) && slices.Contains(s.selectors, "watch "+want)
}

func (s *fakeVW) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	verb := "list "
	if r.URL.Query().Get("watch") == "true" {
		verb = "watch "
	}
	s.lock.Lock()
	s.selectors = append(s.selectors, verb+r.URL.Query().Get("labelSelector"))
	if timeout, err := strconv.Atoi(r.URL.Query().Get("timeoutSeconds")); err == nil && verb == "watch " {
		s.timeouts = append(s.timeouts, timeout)
	}
	s.lock.Unlock()
	if r.URL.Query().Get("watch") == "true" {
		s.watches.Add(1)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	s.lists.Add(1)
	fmt.Fprintf(w, `{"kind":"VirtualMachineList","metadata":{"resourceVersion":"10"},"items":[%s]}`, s.items)
}

func vmItem(cluster, name, vpc string) string {
	return fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"default","resourceVersion":"9","annotations":{"kcp.io/cluster":%q}},"spec":{"vpc":%q}}`, name, cluster, vpc)
}

// A watch runs a reflector per shard, indexes the dependents of every shard
// and is Synced once all of them were listed; a shard that is dropped takes
// its dependents with it.
func TestReflectorsIndexEveryShard(t *testing.T) {
	shard1 := &fakeVW{items: vmItem("c1", "vm-1", "vpc-a")}
	shard2 := &fakeVW{items: vmItem("c2", "vm-2", "vpc-a") + "," + vmItem("c2", "vm-3", "vpc-b")}
	srv1, srv2 := httptest.NewServer(shard1), httptest.NewServer(shard2)
	defer srv1.Close()
	defer srv2.Close()
	var notified atomic.Int32
	w := NewWatch(testSource, []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}, Config{
		Clients: vw.NewClients(&rest.Config{}), PollInterval: time.Second, Notify: func() { notified.Add(1) }, WatchTimeout: time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	urls := []string{srv1.URL, srv2.URL}
	w.lock.Lock()
	w.ensureShards(ctx, urls, true)
	w.state = w.shardState(State{Phase: PhaseSyncing, Shards: 2})
	w.lock.Unlock()

	waitFor(t, func() bool { return w.State().Phase == PhaseSynced })
	if state := w.State(); !strings.Contains(state.Message, "on 2 shard(s)") || state.Shards != 2 {
		t.Errorf("state = %+v", state)
	}
	if notified.Load() == 0 {
		t.Error("the state changed without a notification")
	}
	if got := w.Store().Referencing("c2", []int{0}, "", "vpc-a"); len(got) != 1 || got[0].Name != "vm-2" {
		t.Errorf("dependents of c2 referencing vpc-a: %v", got)
	}
	if shard, _ := w.Store().Shard("c1"); shard != srv1.URL {
		t.Errorf("c1 is on %q, want shard 1", shard)
	}
	if w.Store().Len() != 3 {
		t.Errorf("Len() = %d, want 3", w.Store().Len())
	}
	waitFor(t, func() bool { return shard1.watches.Load() > 0 && shard2.watches.Load() > 0 })
	if !shard1.selected("") || !shard2.selected("") {
		t.Errorf("the dependents were listed or watched with a label selector: %v, %v", shard1.selectors, shard2.selectors)
	}
	// Short watches, whose bookmarks move the store's progress on.
	if got := shard1.watchTimeouts(); len(got) == 0 || got[0] != 1 {
		t.Errorf("the dependents' watch asked for timeouts %v, want 1 s (WatchTimeout)", got)
	}

	// Shard 2 dropped out of the endpoint slice.
	w.lock.Lock()
	w.ensureShards(ctx, urls[:1], true)
	w.lock.Unlock()
	if w.Store().Holds("c2") || w.Store().Len() != 1 {
		t.Errorf("after dropping shard 2: Holds(c2) = %v, Len() = %d", w.Store().Holds("c2"), w.Store().Len())
	}
	// Nothing to run: every reflector stops.
	w.lock.Lock()
	w.ensureShards(ctx, urls, false)
	n := len(w.shards)
	w.lock.Unlock()
	if n != 0 || w.Store().Len() != 0 {
		t.Errorf("after stopping: %d reflectors, %d dependents", n, w.Store().Len())
	}
	lists := shard1.lists.Load()
	time.Sleep(100 * time.Millisecond)
	if shard1.lists.Load() != lists {
		t.Error("a stopped reflector listed again")
	}
}

// Until every shard has been listed, the watch is Syncing, with the last
// error of a shard that failed.
func TestAShardThatFailsKeepsTheWatchSyncing(t *testing.T) {
	ok := &fakeVW{items: vmItem("c1", "vm-1", "vpc-a")}
	srvOK := httptest.NewServer(ok)
	defer srvOK.Close()
	srvFail := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","message":"not yet","code":403}`)
	}))
	defer srvFail.Close()
	var notified atomic.Int32
	w := NewWatch(testSource, []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}, Config{
		Clients: vw.NewClients(&rest.Config{}), PollInterval: time.Second, Notify: func() { notified.Add(1) }, WatchTimeout: time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.lock.Lock()
	w.ensureShards(ctx, []string{srvOK.URL, srvFail.URL}, true)
	w.lock.Unlock()
	waitFor(t, func() bool { return w.Store().Holds("c1") && notified.Load() > 0 })
	waitFor(t, func() bool {
		w.lock.Lock()
		defer w.lock.Unlock()
		state := w.shardState(State{Phase: PhaseSyncing})
		return strings.Contains(state.Message, "last error on "+srvFail.URL)
	})
	w.lock.Lock()
	state := w.shardState(State{Phase: PhaseSyncing})
	w.lock.Unlock()
	if state.Phase != PhaseSyncing || !strings.Contains(state.Message, "not yet") {
		t.Errorf("with a shard that refuses its list: %+v", state)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestOnShards(t *testing.T) {
	urls := []string{"https://shard-1:6443/services/apiexport/c/e", "https://shard-10:6443/services/apiexport/c/e", "https://shard-2:6443/services/apiexport/c/e"}
	tests := []struct {
		shards []string
		want   []string
	}{
		{nil, urls},
		{[]string{"https://shard-1:6443"}, urls[:1]},
		{[]string{"https://shard-1:6443/", "https://shard-2:6443"}, []string{urls[0], urls[2]}},
		{[]string{"https://shard-3:6443"}, []string{}},
	}
	for _, tt := range tests {
		if got := onShards(slices.Clone(urls), tt.shards); !slices.Equal(got, tt.want) {
			t.Errorf("onShards(%v) = %v, want %v", tt.shards, got, tt.want)
		}
	}
}

func vpcItem(cluster, namespace, name string) string {
	return fmt.Sprintf(`{"metadata":{"name":%q,"namespace":%q,"resourceVersion":"9","uid":"u-%s","labels":{"a":"b"},"annotations":{"kcp.io/cluster":%q}},"spec":{"cidr":"10.0.0.0/8"}}`, name, namespace, name, cluster)
}

// A source without paths keeps no store; with SetWatchTargets it watches
// its objects on every shard into its set of targets, which knows every
// object once each shard has listed, and forgets a shard that is dropped.
// It lists and watches only the objects not labelled cleared, with
// client-go's watch timeout. Turned off,
// its reflectors stop and the set is emptied. Its state does
// not depend on the targets' reflectors.
func TestTargetsOfEveryShard(t *testing.T) {
	shard1 := &fakeVW{items: vpcItem("c1", "default", "vpc-a")}
	shard2 := &fakeVW{items: vpcItem("c2", "default", "vpc-b") + "," + vpcItem("c2", "team", "vpc-c")}
	srv1, srv2 := httptest.NewServer(shard1), httptest.NewServer(shard2)
	defer srv1.Close()
	defer srv2.Close()
	var changed atomic.Int32
	w := NewWatch(testSource, nil, Config{Clients: vw.NewClients(&rest.Config{}), PollInterval: time.Second, WatchTimeout: time.Second, TargetsChanged: func() { changed.Add(1) }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	urls := []string{srv1.URL, srv2.URL}
	apply := func(run bool) {
		w.lock.Lock()
		w.ensureShards(ctx, urls, run)
		w.urls, w.inspected = urls, true
		w.state = w.shardState(State{Phase: PhaseSyncing, Shards: 2})
		w.lock.Unlock()
	}
	apply(false)
	if set, ok := w.Targets(); ok || set.Len() != 0 {
		t.Errorf("without SetWatchTargets: Targets() = %d objects, %v", set.Len(), ok)
	}
	w.SetWatchTargets(true)
	apply(true)
	waitFor(t, func() bool { _, ok := w.Targets(); return ok })
	set, _ := w.Targets()
	if set.Len() != 3 || !set.Has("c2", "team", "vpc-c") || set.Has("c1", "team", "vpc-c") || !set.Named("c1", "vpc-a") {
		t.Errorf("the set of targets: %d objects", set.Len())
	}
	if w.Store().Len() != 0 || changed.Load() == 0 {
		t.Errorf("the store holds %d objects, %d changes notified", w.Store().Len(), changed.Load())
	}
	if state := w.State(); state.Phase != PhaseSynced || state.Listed {
		t.Errorf("state = %+v; the state of a source without paths does not follow its targets", state)
	}
	waitFor(t, func() bool { return shard1.watches.Load() > 0 && shard2.watches.Load() > 0 })
	// Objects labelled cleared are left out, their deletions too.
	if want := "!" + depv1alpha1.LabelCleared; !shard1.selected(want) || !shard2.selected(want) {
		t.Errorf("the targets were listed or watched with other label selectors than %q: %v, %v", want, shard1.selectors, shard2.selectors)
	}
	// The targets need no bookmarks: the reflector's timeout, 5 to 10
	// minutes, not WatchTimeout.
	if got := shard1.watchTimeouts(); len(got) == 0 || got[0] < 300 {
		t.Errorf("the targets' watch asked for timeouts %v, want client-go's (at least 300 s)", got)
	}

	// Shard 2 dropped out of the endpoint slice.
	w.lock.Lock()
	w.ensureShards(ctx, urls[:1], true)
	w.urls = urls[:1]
	w.lock.Unlock()
	if set.Has("c2", "default", "vpc-b") || set.Len() != 1 {
		t.Errorf("after dropping shard 2: %d objects", set.Len())
	}
	if _, ok := w.Targets(); !ok {
		t.Error("the remaining shard is listed: the set is complete")
	}

	// A new shard: not complete until it has listed.
	slow := make(chan struct{})
	srv3 := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		<-slow
		(&fakeVW{}).ServeHTTP(rw, r)
	}))
	defer srv3.Close()
	defer close(slow)
	w.lock.Lock()
	w.urls = []string{srv1.URL, srv3.URL}
	w.ensureShards(ctx, w.urls, true)
	w.lock.Unlock()
	if _, ok := w.Targets(); ok {
		t.Error("a shard that has not listed yet: the set claims to be complete")
	}

	w.SetWatchTargets(false)
	w.lock.Lock()
	w.ensureShards(ctx, nil, false)
	w.lock.Unlock()
	if set, ok := w.Targets(); ok || set.Len() != 0 {
		t.Errorf("turned off: Targets() = %d objects, %v", set.Len(), ok)
	}
}

// A source with paths watches its objects into its store, never into a set
// of targets: the store tells whether they exist.
func TestIndexedSourceHasNoTargets(t *testing.T) {
	w := NewWatch(testSource, []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}, Config{PollInterval: time.Second})
	w.SetWatchTargets(true)
	w.lock.Lock()
	w.inspected, w.state = true, State{Phase: PhaseSynced}
	w.lock.Unlock()
	if _, ok := w.Targets(); ok {
		t.Error("an indexed source claims a complete set of targets")
	}
}
