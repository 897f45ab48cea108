package index

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// gatedShard serves the virtual workspace of one shard for c1: each LIST
// returns the dependents that existed when it arrived, and the first one
// is answered only once release is closed.
type gatedShard struct {
	lock     sync.Mutex
	items    []string
	requests int
	started  chan struct{}
	release  chan struct{}
}

func (s *gatedShard) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.lock.Lock()
	s.requests++
	first := s.requests == 1
	items := slices.Clone(s.items)
	s.lock.Unlock()
	if first {
		close(s.started)
		<-s.release
	}
	fmt.Fprint(w, `{"kind":"VirtualMachineList","metadata":{"resourceVersion":"1"},"items":[`)
	for i, it := range items {
		if i > 0 {
			fmt.Fprint(w, ",")
		}
		fmt.Fprint(w, it)
	}
	fmt.Fprint(w, `]}`)
}

func (s *gatedShard) add(name, vpc string) {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.items = append(s.items, fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"default","uid":"uid-%s","annotations":{"kcp.io/cluster":"c1"}},"spec":{"vpcRef":{"name":%q}}}`, name, name, vpc))
}

func gatedIndex(t *testing.T, shard *gatedShard) *Index {
	t.Helper()
	srv := httptest.NewServer(shard)
	t.Cleanup(srv.Close)
	ix := routedIndex(t, true)
	ix.sources[testSource].urls = []string{srv.URL}
	return ix
}

func vmOf(name string) Dependent {
	return Dependent{Cluster: "c1", Namespace: "default", Name: name, UID: types.UID("uid-" + name)}
}

// Confirmations of one scope that arrive while a read of it is in flight
// share the next read, which starts after all of them arrived: it sees a
// dependent created after the first read started, and each call gets the
// dependents that reference its own name.
func TestConcurrentConfirmationsShareTheNextRead(t *testing.T) {
	shard := &gatedShard{started: make(chan struct{}), release: make(chan struct{})}
	shard.add("vm-a", "vpc-a")
	ix := gatedIndex(t, shard)
	ctx := context.Background()
	paths := []fieldpath.Path{vpcRef}

	type result struct {
		deps    []Dependent
		scanned int
		err     error
	}
	confirm := func(name string) chan result {
		ch := make(chan result, 1)
		go func() {
			deps, scanned, err := ix.Confirm(ctx, testSource, paths, "c1", "default", name)
			ch <- result{deps, scanned, err}
		}()
		return ch
	}

	first := confirm("vpc-a")
	<-shard.started
	// Created after the first read started: the first read may not see it;
	// every later call must.
	shard.add("vm-b", "vpc-b")
	later := map[string]chan result{}
	for _, name := range []string{"vpc-a", "vpc-b", "vpc-c"} {
		later[name] = confirm(name)
	}
	// All of them have joined the next read before the first one finishes.
	waitFor(t, func() bool {
		ix.liveLock.Lock()
		defer ix.liveLock.Unlock()
		sr := ix.live[scopeKey{src: testSource, cluster: "c1", namespace: "default"}]
		return sr != nil && sr.next != nil && len(sr.next.names) == 3
	})
	close(shard.release)

	if r := <-first; r.err != nil || !reflect.DeepEqual(r.deps, []Dependent{vmOf("vm-a")}) {
		t.Errorf("first confirmation = %v, %v", r.deps, r.err)
	}
	want := map[string][]Dependent{"vpc-a": {vmOf("vm-a")}, "vpc-b": {vmOf("vm-b")}, "vpc-c": nil}
	for name, ch := range later {
		r := <-ch
		if r.err != nil || r.scanned != 2 || !reflect.DeepEqual(r.deps, want[name]) {
			t.Errorf("Confirm(%s) = %v, %d, %v; want %v after reading 2", name, r.deps, r.scanned, r.err, want[name])
		}
	}
	if shard.requests != 2 {
		t.Errorf("%d reads for 4 confirmations, want 2", shard.requests)
	}
	ix.liveLock.Lock()
	defer ix.liveLock.Unlock()
	if len(ix.live) != 0 {
		t.Errorf("live reads left behind: %v", ix.live)
	}
}

// A caller whose request is cancelled stops waiting for the read.
func TestConfirmStopsWaitingWhenTheRequestIsDone(t *testing.T) {
	shard := &gatedShard{started: make(chan struct{}), release: make(chan struct{})}
	ix := gatedIndex(t, shard)
	t.Cleanup(func() { close(shard.release) }) // before the server closes
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _, err := ix.Confirm(ctx, testSource, []fieldpath.Path{vpcRef}, logicalcluster.Name("c1"), "default", "vpc-a")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Confirm() error = %v, want the request's deadline", err)
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

// A read that hangs holds up the decisions of its scope no longer than the
// read timeout: the read that was joined meanwhile starts then.
func TestAHungReadEndsAtTheReadTimeout(t *testing.T) {
	shard := &gatedShard{started: make(chan struct{}), release: make(chan struct{})}
	shard.add("vm-a", "vpc-a")
	ix := gatedIndex(t, shard)
	t.Cleanup(func() { close(shard.release) }) // before the server closes
	ix.opts.ReadTimeout = 200 * time.Millisecond
	ctx := context.Background()
	paths := []fieldpath.Path{vpcRef}

	hung := make(chan error, 1)
	go func() {
		_, _, err := ix.Confirm(ctx, testSource, paths, "c1", "default", "vpc-a")
		hung <- err
	}()
	<-shard.started
	start := time.Now()
	deps, _, err := ix.Confirm(ctx, testSource, paths, "c1", "default", "vpc-a")
	if err != nil || !reflect.DeepEqual(deps, []Dependent{vmOf("vm-a")}) {
		t.Errorf("Confirm() after a hung read = %v, %v", deps, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the second decision waited %s", took)
	}
	if err := <-hung; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hung read: %v, want its deadline", err)
	}
}
