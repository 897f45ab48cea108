package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index/sources"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

var (
	vms        = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}
	testSource = sources.Source{Export: kcp.ObjectKey{Cluster: "provider", Name: "compute.io"}, Resource: vms}
	vpcRef     = fieldpathtest.MustParse(".spec.vpcRef.name")
	nics       = fieldpathtest.MustParse(".spec.nics[*].vpc")
	c1Default  = Scope{Source: testSource, Cluster: "c1", Namespace: "default"}
)

// gatedReads lists the dependents of every scope: each read returns the
// dependents that existed when it started, and the first one returns only
// once release is closed (or its context is done).
type gatedReads struct {
	lock    sync.Mutex
	items   []string
	scopes  []Scope
	started chan struct{}
	release chan struct{}
}

func newGatedReads() *gatedReads {
	return &gatedReads{started: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedReads) read(ctx context.Context, scope Scope, visit func(item []byte) error) error {
	g.lock.Lock()
	g.scopes = append(g.scopes, scope)
	first := len(g.scopes) == 1
	items := slices.Clone(g.items)
	g.lock.Unlock()
	if first {
		close(g.started)
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, it := range items {
		if err := visit([]byte(it)); err != nil {
			return err
		}
	}
	return nil
}

func (g *gatedReads) add(name, vpc string) {
	g.lock.Lock()
	defer g.lock.Unlock()
	g.items = append(g.items, fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"default","uid":"uid-%s","annotations":{"kcp.io/cluster":"c1"}},"spec":{"vpcRef":{"name":%q}}}`, name, name, vpc))
}

func (g *gatedReads) reads() int {
	g.lock.Lock()
	defer g.lock.Unlock()
	return len(g.scopes)
}

func vmOf(name string) kcp.Meta {
	return kcp.Meta{Cluster: "c1", Namespace: "default", Name: name, UID: types.UID("uid-" + name)}
}

type result struct {
	deps    []kcp.Meta
	scanned int
	err     error
}

func confirm(rs *Reads, scope Scope, paths []fieldpath.Reference, name string) chan result {
	ch := make(chan result, 1)
	go func() {
		deps, scanned, err := rs.Confirm(context.Background(), scope, paths, scope.Namespace, name)
		ch <- result{deps, scanned, err}
	}()
	return ch
}

// Confirmations of one scope that arrive while a read of it is in flight
// share the next read, which starts after all of them arrived: it sees a
// dependent created after the first read started, and each call gets the
// dependents that reference its own name.
func TestConcurrentConfirmationsShareTheNextRead(t *testing.T) {
	g := newGatedReads()
	g.add("vm-a", "vpc-a")
	rs := New(g.read, nil, 0)
	paths := []fieldpath.Reference{vpcRef}

	first := confirm(rs, c1Default, paths, "vpc-a")
	<-g.started
	// Created after the first read started: the first read may not see it;
	// every later call must.
	g.add("vm-b", "vpc-b")
	later := map[string]chan result{}
	for _, name := range []string{"vpc-a", "vpc-b", "vpc-c"} {
		later[name] = confirm(rs, c1Default, paths, name)
	}
	// All of them have joined the next read before the first one finishes.
	waitFor(t, func() bool {
		rs.lock.Lock()
		defer rs.lock.Unlock()
		sr := rs.scopes[c1Default]
		return sr != nil && sr.running && sr.next != nil && len(sr.next.names) == 3
	})
	if n := g.reads(); n != 1 {
		t.Errorf("%d reads started while the first was in flight", n)
	}
	close(g.release)

	if r := <-first; r.err != nil || r.scanned != 1 || !reflect.DeepEqual(r.deps, []kcp.Meta{vmOf("vm-a")}) {
		t.Errorf("first confirmation = %v, %d, %v", r.deps, r.scanned, r.err)
	}
	want := map[string][]kcp.Meta{"vpc-a": {vmOf("vm-a")}, "vpc-b": {vmOf("vm-b")}, "vpc-c": nil}
	for name, ch := range later {
		r := <-ch
		if r.err != nil || r.scanned != 2 || !reflect.DeepEqual(r.deps, want[name]) {
			t.Errorf("Confirm(%s) = %v, %d, %v; want %v after reading 2", name, r.deps, r.scanned, r.err, want[name])
		}
	}
	if n := g.reads(); n != 2 {
		t.Errorf("%d reads for 4 confirmations, want 2", n)
	}
	g.lock.Lock()
	if !slices.Equal(g.scopes, []Scope{c1Default, c1Default}) {
		t.Errorf("read scopes %v", g.scopes)
	}
	g.lock.Unlock()
	waitFor(t, func() bool {
		rs.lock.Lock()
		defer rs.lock.Unlock()
		return len(rs.scopes) == 0
	})
}

// Reads of different scopes do not wait for each other.
func TestReadsOfOtherScopesAreApart(t *testing.T) {
	g := newGatedReads()
	g.add("vm-a", "vpc-a")
	t.Cleanup(func() { close(g.release) })
	rs := New(g.read, nil, 0)
	paths := []fieldpath.Reference{vpcRef}
	hung := confirm(rs, c1Default, paths, "vpc-a")
	<-g.started
	for _, scope := range []Scope{
		{Source: testSource, Cluster: "c1"},
		{Source: testSource, Cluster: "c1", Namespace: "other"},
		{Source: testSource, Cluster: "c2", Namespace: "default"},
		{Source: sources.Source{Export: testSource.Export, Resource: vms.GroupResource().WithVersion("v2")}, Cluster: "c1", Namespace: "default"},
	} {
		select {
		case r := <-confirm(rs, scope, paths, "vpc-a"):
			if r.err != nil || r.scanned != 1 {
				t.Errorf("Confirm(%+v) = %v, %d, %v", scope, r.deps, r.scanned, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Confirm(%+v) waits for the read of another scope", scope)
		}
	}
	select {
	case r := <-hung:
		t.Errorf("the first read ended before it was released: %+v", r)
	default:
	}
}

// A read finds, for each call, the dependents that hold its name at one of
// its own paths, each once; a dependent without a cluster annotation is of
// the scope's cluster.
func TestConfirmMatchesNamesAndPaths(t *testing.T) {
	items := []string{
		`{"metadata":{"name":"vm-1","namespace":"default","uid":"u1","annotations":{"kcp.io/cluster":"c1"}},"spec":{"vpcRef":{"name":"vpc-a"},"nics":[{"vpc":"vpc-a"},{"vpc":"vpc-a"}]}}`,
		`{"metadata":{"name":"vm-2","namespace":"default","uid":"u2","deletionTimestamp":"2026-01-01T00:00:00Z"},"spec":{"nics":[{"vpc":"vpc-b"},{"vpc":"vpc-a"}]}}`,
		`{"metadata":{"name":"vm-3","namespace":"default","uid":"u3"},"spec":{"vpcRef":{"name":"vpc-b"}}}`,
		`{"metadata":{"name":"vm-4","namespace":"default","uid":"u4"},"spec":{"vpcRef":{"name":7}}}`,
	}
	g := newGatedReads()
	g.items = items
	rs := New(g.read, nil, 0)
	first := confirm(rs, c1Default, []fieldpath.Reference{vpcRef}, "unrelated")
	<-g.started
	// These share the next read, which looks for vpc-a and vpc-b at both
	// paths.
	byRef := confirm(rs, c1Default, []fieldpath.Reference{vpcRef}, "vpc-a")
	byNic := confirm(rs, c1Default, []fieldpath.Reference{nics}, "vpc-a")
	byRefB := confirm(rs, c1Default, []fieldpath.Reference{vpcRef}, "vpc-b")
	waitFor(t, func() bool {
		rs.lock.Lock()
		defer rs.lock.Unlock()
		sr := rs.scopes[c1Default]
		return sr != nil && sr.next != nil && len(sr.next.names) == 2 && len(sr.next.paths) == 2
	})
	byBoth := confirm(rs, c1Default, []fieldpath.Reference{vpcRef, nics}, "vpc-a")
	close(g.release)
	if r := <-first; r.err != nil || r.deps != nil || r.scanned != 4 {
		t.Errorf("Confirm(unrelated) = %v, %d, %v", r.deps, r.scanned, r.err)
	}
	vm1 := kcp.Meta{Cluster: "c1", Namespace: "default", Name: "vm-1", UID: "u1"}
	vm2 := kcp.Meta{Cluster: "c1", Namespace: "default", Name: "vm-2", UID: "u2", Terminating: true}
	vm3 := kcp.Meta{Cluster: "c1", Namespace: "default", Name: "vm-3", UID: "u3"}
	for name, tt := range map[string]struct {
		ch   chan result
		want []kcp.Meta
	}{
		"vpc-a at .spec.vpcRef.name": {byRef, []kcp.Meta{vm1}},
		"vpc-a at the nics":          {byNic, []kcp.Meta{vm1, vm2}},
		"vpc-a at both":              {byBoth, []kcp.Meta{vm1, vm2}},
		"vpc-b at .spec.vpcRef.name": {byRefB, []kcp.Meta{vm3}},
	} {
		r := <-tt.ch
		if r.err != nil || r.scanned != 4 || !reflect.DeepEqual(r.deps, tt.want) {
			t.Errorf("%s: %v, %d, %v; want %v", name, r.deps, r.scanned, r.err, tt.want)
		}
	}
}

// A read that fails fails every call that shares it, with how many
// dependents it read; a dependent that cannot be read fails it too, and a
// panic fails it without ending the process.
func TestAFailedReadFailsItsCalls(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name        string
		read        ReadFunc
		wantErr     func(error) bool
		wantScanned int
	}{
		{
			name: "an error after two dependents",
			read: func(_ context.Context, _ Scope, visit func([]byte) error) error {
				_ = visit([]byte(`{"metadata":{"name":"a"}}`))
				_ = visit([]byte(`{"metadata":{"name":"b"}}`))
				return boom
			},
			wantErr: func(err error) bool { return errors.Is(err, boom) }, wantScanned: 2,
		},
		{
			name: "malformed JSON at a path",
			read: func(_ context.Context, _ Scope, visit func([]byte) error) error {
				return visit([]byte(`{"metadata":{"name":"a"},"spec":{"vpcRef":{"name":"a\q"}}}`))
			},
			wantErr: func(err error) bool { return err != nil && strings.Contains(err.Error(), vpcRef.String()) }, wantScanned: 1,
		},
		{
			name: "metadata that is not strings, of a dependent that holds the name",
			read: func(_ context.Context, _ Scope, visit func([]byte) error) error {
				return visit([]byte(`{"metadata":{"name":1},"spec":{"vpcRef":{"name":"vpc-a"}}}`))
			},
			wantErr: func(err error) bool { return err != nil && strings.Contains(err.Error(), "not a string") }, wantScanned: 1,
		},
		{
			name: "a panic",
			read: func(context.Context, Scope, func([]byte) error) error { panic("oops") },
			wantErr: func(err error) bool {
				return err != nil && strings.Contains(err.Error(), "panicked: oops") && strings.Contains(err.Error(), testSource.String())
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := New(tt.read, nil, time.Second)
			deps, scanned, err := rs.Confirm(context.Background(), c1Default, []fieldpath.Reference{vpcRef}, c1Default.Namespace, "vpc-a")
			if !tt.wantErr(err) || deps != nil || scanned != tt.wantScanned {
				t.Errorf("Confirm() = %v, %d, %v", deps, scanned, err)
			}
			// The scope is read again next time.
			waitFor(t, func() bool {
				rs.lock.Lock()
				defer rs.lock.Unlock()
				return len(rs.scopes) == 0
			})
		})
	}
	// Only a dependent that holds the name is decoded.
	rs := New(func(_ context.Context, _ Scope, visit func([]byte) error) error {
		return visit([]byte(`{"metadata":{"name":1},"spec":{"vpcRef":{"name":"vpc-b"}}}`))
	}, nil, time.Second)
	if deps, scanned, err := rs.Confirm(context.Background(), c1Default, []fieldpath.Reference{vpcRef}, c1Default.Namespace, "vpc-a"); err != nil || deps != nil || scanned != 1 {
		t.Errorf("Confirm() with a malformed dependent that does not hold the name = %v, %d, %v", deps, scanned, err)
	}
}

// A caller whose request is cancelled stops waiting for the read.
func TestConfirmStopsWaitingWhenTheRequestIsDone(t *testing.T) {
	g := newGatedReads()
	rs := New(g.read, nil, 0)
	t.Cleanup(func() { close(g.release) })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := rs.Confirm(ctx, c1Default, []fieldpath.Reference{vpcRef}, c1Default.Namespace, "vpc-a")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Confirm() error = %v, want the request's deadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Confirm() returned after %s", took)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := rs.Confirm(canceled, c1Default, []fieldpath.Reference{vpcRef}, c1Default.Namespace, "vpc-a"); !errors.Is(err, context.Canceled) {
		t.Errorf("Confirm() of a canceled request: %v", err)
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
	g := newGatedReads()
	g.add("vm-a", "vpc-a")
	t.Cleanup(func() { close(g.release) })
	const timeout = 200 * time.Millisecond
	rs := New(g.read, nil, timeout)
	paths := []fieldpath.Reference{vpcRef}

	hung := confirm(rs, c1Default, paths, "vpc-a")
	<-g.started
	start := time.Now()
	deps, _, err := rs.Confirm(context.Background(), c1Default, paths, c1Default.Namespace, "vpc-a")
	if err != nil || !reflect.DeepEqual(deps, []kcp.Meta{vmOf("vm-a")}) {
		t.Errorf("Confirm() after a hung read = %v, %v", deps, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the second decision waited %s", took)
	}
	if r := <-hung; !errors.Is(r.err, context.DeadlineExceeded) {
		t.Errorf("hung read: %v, want its deadline", r.err)
	}
	if took := time.Since(start); took < timeout/2 {
		t.Errorf("the hung read ended after %s, before its timeout", took)
	}
}

func TestDefaultTimeout(t *testing.T) {
	for _, timeout := range []time.Duration{0, -time.Second} {
		if rs := New(nil, nil, timeout); rs.timeout != DefaultTimeout {
			t.Errorf("New(%s).timeout = %s, want %s", timeout, rs.timeout, DefaultTimeout)
		}
	}
	if rs := New(nil, nil, time.Second); rs.timeout != time.Second {
		t.Errorf("New(1s).timeout = %s", rs.timeout)
	}
}

// vmJSON renders one VirtualMachine shaped like kcp's responses (~700
// bytes) that references vpc.
func vmJSON(i int, vpc string) string {
	return fmt.Sprintf(`{"apiVersion":"compute.io/v1","kind":"VirtualMachine","metadata":{"annotations":{"kcp.io/cluster":"consumer","note":"created by the benchmark"},`+
		`"creationTimestamp":"2026-11-22T10:00:00Z","generation":1,"labels":{"app":"web","tier":"frontend"},"name":"vm-%06d","namespace":"default",`+
		`"resourceVersion":"%d","uid":"5f1c1a2e-0000-4000-8000-%012d"},"spec":{"cpu":4,"memory":"8Gi","image":"registry.example/os:1.2.3",`+
		`"nics":[{"name":"eth0","vpc":"%s","ip":"10.0.0.%d"},{"name":"eth1","vpc":"mgmt","ip":"10.1.0.%d"}],"vpcRef":{"name":"%s"}},`+
		`"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-11-22T10:00:00Z"}]}}`,
		i, 1000+i, i, vpc, i%250, i%250, vpc)
}

// listBody renders a list of n dependents in namespace default, each
// referencing one of 50 VPCs.
func listBody(n int) []byte {
	var body bytes.Buffer
	body.WriteString(`{"apiVersion":"compute.io/v1","kind":"VirtualMachineList","metadata":{"resourceVersion":"4242"},"items":[`)
	for i := range n {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(vmJSON(i, fmt.Sprintf("vpc-%d", i%50)))
	}
	body.WriteString(`]}`)
	return body.Bytes()
}

// BenchmarkConfirm measures the live read that confirms a miss, served over
// HTTP from memory, with n dependents in the namespace, none referencing
// the object: one decision at a time, and 16 concurrent decisions in the
// same namespace, which share reads (reported as reads per decision).
func BenchmarkConfirm(b *testing.B) {
	paths := []fieldpath.Reference{vpcRef, nics}
	scope := Scope{Source: testSource, Cluster: "consumer", Namespace: "default"}
	for _, n := range []int{10, 1000, 10000} {
		body := listBody(n)
		var reads atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			reads.Add(1)
			_, _ = w.Write(body)
		}))
		r, err := vw.NewClient(&rest.Config{}, srv.URL)
		if err != nil {
			b.Fatal(err)
		}
		rs := New(func(ctx context.Context, scope Scope, visit func([]byte) error) error {
			_, err := r.List(ctx, vw.ResourcePath(scope.Cluster.Path(), scope.Source.Resource, scope.Namespace), nil, visit)
			return err
		}, nil, 0)
		// confirm may run on other goroutines than the benchmark's.
		confirm := func(b *testing.B, name string) {
			deps, scanned, err := rs.Confirm(context.Background(), scope, paths, scope.Namespace, name)
			if err != nil || len(deps) != 0 || scanned != n {
				b.Error(deps, scanned, err)
			}
		}
		b.Run(fmt.Sprintf("sequential/dependents=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				confirm(b, "vpc-a")
			}
		})
		b.Run(fmt.Sprintf("16-concurrent/dependents=%d", n), func(b *testing.B) {
			reads.Store(0)
			decisions := 0
			for b.Loop() {
				var wg sync.WaitGroup
				for i := range 16 {
					wg.Go(func() { confirm(b, fmt.Sprintf("vpc-free-%d", i)) })
				}
				wg.Wait()
				decisions += 16
			}
			b.ReportMetric(float64(reads.Load())/float64(decisions), "reads/decision")
		})
		srv.Close()
	}
}

// A read asks the catch-up first: an answer replaces the read (each caller
// gets the answer for its own name and paths), no answer or an error lets
// the scope be listed.
func TestCatchUpAnswersInsteadOfTheRead(t *testing.T) {
	indexed := func(paths []fieldpath.Reference, namespace, name string) []kcp.Meta {
		if name == "vpc-a" && namespace == "default" && slices.Equal(paths, []fieldpath.Reference{vpcRef}) {
			return []kcp.Meta{vmOf("vm-indexed")}
		}
		return nil
	}
	tests := []struct {
		name        string
		answer      Answer
		err         error
		wantDeps    []kcp.Meta
		wantScanned int
		wantReads   int
	}{
		{name: "answered", answer: indexed, wantDeps: []kcp.Meta{vmOf("vm-indexed")}, wantScanned: 0, wantReads: 0},
		{name: "declined", wantDeps: []kcp.Meta{vmOf("vm-listed")}, wantScanned: 1, wantReads: 1},
		{name: "failed", answer: indexed, err: errors.New("probe failed"), wantDeps: []kcp.Meta{vmOf("vm-listed")}, wantScanned: 1, wantReads: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGatedReads()
			close(g.release)
			g.add("vm-listed", "vpc-a")
			var asked []Scope
			rs := New(g.read, func(_ context.Context, scope Scope, paths []fieldpath.Reference) (Answer, error) {
				asked = append(asked, scope)
				if !slices.Equal(paths, []fieldpath.Reference{vpcRef}) {
					t.Errorf("catch-up asked for paths %v", paths)
				}
				return tt.answer, tt.err
			}, 0)
			deps, scanned, err := rs.Confirm(context.Background(), c1Default, []fieldpath.Reference{vpcRef}, "default", "vpc-a")
			if err != nil || scanned != tt.wantScanned || !reflect.DeepEqual(deps, tt.wantDeps) {
				t.Errorf("Confirm() = %v, %d, %v; want %v, %d", deps, scanned, err, tt.wantDeps, tt.wantScanned)
			}
			if n := g.reads(); n != tt.wantReads {
				t.Errorf("%d reads, want %d", n, tt.wantReads)
			}
			if !slices.Equal(asked, []Scope{c1Default}) {
				t.Errorf("catch-up asked for %v", asked)
			}
		})
	}
}
