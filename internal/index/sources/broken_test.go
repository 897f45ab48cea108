package sources

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// The state of an indexed source follows its shard reflectors: Syncing
// until each has listed once, Synced from then on except while a watch is
// broken (from an error until the reflector lists again or watches again
// from where it stopped), and Listed from the first complete list of every
// shard on, broken watches or not.
func TestStateFollowsBrokenWatches(t *testing.T) {
	const shard1, shard2 = "https://shard-1", "https://shard-2"
	boom := errors.New("boom")
	type step struct {
		// do changes a shard: "list", "watch" or "error".
		shard, do string
		// want: the phase, Listed, and what the message says (and must
		// not say).
		phase     Phase
		listed    bool
		message   []string
		notInMsg  []string
		wantNotif bool
	}
	tests := []struct {
		name   string
		shards []string
		steps  []step
	}{
		{"one shard: listed, broken, watching again, broken, listed again", []string{shard1}, []step{
			{shard: shard1, do: "list", phase: PhaseSynced, listed: true, message: []string{"Indexing"}, wantNotif: true},
			{shard: shard1, do: "error", phase: PhaseSyncing, listed: true,
				message: []string{"The watch of virtualmachines.compute.io", "broke; listing again", "(last error on " + shard1 + ": boom)"}, wantNotif: true},
			{shard: shard1, do: "error", phase: PhaseSyncing, listed: true, message: []string{"broke"}},
			{shard: shard1, do: "watch", phase: PhaseSynced, listed: true, message: []string{"Indexing"}, notInMsg: []string{"broke", "boom"}, wantNotif: true},
			{shard: shard1, do: "watch", phase: PhaseSynced, listed: true, message: []string{"Indexing"}},
			{shard: shard1, do: "error", phase: PhaseSyncing, listed: true, message: []string{"broke", "boom"}, wantNotif: true},
			{shard: shard1, do: "list", phase: PhaseSynced, listed: true, message: []string{"Indexing"}, notInMsg: []string{"broke", "boom"}, wantNotif: true},
		}},
		{"one shard: errors before the first list leave it unlisted", []string{shard1}, []step{
			{shard: shard1, do: "error", phase: PhaseSyncing, listed: false, message: []string{"Listing virtualmachines.compute.io", "(last error on " + shard1 + ": boom)"}, notInMsg: []string{"broke"}, wantNotif: true},
			// A watch cannot start before a list; if it did, the store would
			// still be empty.
			{shard: shard1, do: "watch", phase: PhaseSyncing, listed: false, message: []string{"Listing"}, notInMsg: []string{"broke"}},
			{shard: shard1, do: "error", phase: PhaseSyncing, listed: false, message: []string{"Listing"}, notInMsg: []string{"broke"}},
			{shard: shard1, do: "list", phase: PhaseSynced, listed: true, message: []string{"Indexing"}, notInMsg: []string{"boom"}, wantNotif: true},
		}},
		{"two shards: listed once both are; a broken watch on one makes the source Syncing", []string{shard1, shard2}, []step{
			{shard: shard1, do: "list", phase: PhaseSyncing, listed: false, message: []string{"Listing"}},
			{shard: shard2, do: "error", phase: PhaseSyncing, listed: false, message: []string{"Listing", "last error on " + shard2}, notInMsg: []string{"broke"}, wantNotif: true},
			{shard: shard2, do: "list", phase: PhaseSynced, listed: true, message: []string{"on 2 shard(s)"}, wantNotif: true},
			{shard: shard2, do: "error", phase: PhaseSyncing, listed: true, message: []string{"broke", "last error on " + shard2}, notInMsg: []string{shard1}, wantNotif: true},
			{shard: shard2, do: "watch", phase: PhaseSynced, listed: true, message: []string{"Indexing"}, notInMsg: []string{"broke", "boom"}, wantNotif: true},
			{shard: shard1, do: "error", phase: PhaseSyncing, listed: true, message: []string{"broke", "last error on " + shard1}, notInMsg: []string{shard2}, wantNotif: true},
			{shard: shard1, do: "list", phase: PhaseSynced, listed: true, message: []string{"Indexing"}, notInMsg: []string{"broke", "boom"}, wantNotif: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var notified atomic.Int32
			w := NewWatch(testSource, []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}, Config{PollInterval: time.Second, Notify: func() { notified.Add(1) }})
			shards := map[string]*shardWatch{}
			w.lock.Lock()
			for _, u := range tt.shards {
				shards[u] = &shardWatch{url: u, cancel: func() {}}
				w.shards[u] = shards[u]
			}
			w.state = w.shardState(State{Phase: PhaseSyncing, Shards: len(tt.shards)})
			w.lock.Unlock()
			if s := w.State(); s.Phase != PhaseSyncing || s.Listed {
				t.Fatalf("initial state %+v, want Syncing and not listed", s)
			}
			for i, st := range tt.steps {
				before := notified.Load()
				s := shards[st.shard]
				switch st.do {
				case "list":
					s.setListed()
				case "watch":
					s.setWatching()
				case "error":
					s.setError(boom)
				}
				w.refreshState()
				state := w.State()
				if state.Phase != st.phase || state.Listed != st.listed {
					t.Errorf("step %d (%s %s): phase %s, listed %v; want %s, %v (%s)", i, st.do, st.shard, state.Phase, state.Listed, st.phase, st.listed, state.Message)
				}
				for _, m := range st.message {
					if !strings.Contains(state.Message, m) {
						t.Errorf("step %d (%s %s): message %q does not say %q", i, st.do, st.shard, state.Message, m)
					}
				}
				for _, m := range st.notInMsg {
					if strings.Contains(state.Message, m) {
						t.Errorf("step %d (%s %s): message %q says %q", i, st.do, st.shard, state.Message, m)
					}
				}
				if got := notified.Load() > before; got != st.wantNotif {
					t.Errorf("step %d (%s %s): notified %v, want %v", i, st.do, st.shard, got, st.wantNotif)
				}
				if state.Shards != len(tt.shards) {
					t.Errorf("step %d: the number of shards changed: %+v", i, state)
				}
			}
		})
	}
}

// The state of a source whose watches broke on several shards is the same
// whenever it is derived: nothing changed, so nothing is notified (the
// rules' DependentsIndexed condition carries the message).
func TestStateOfSeveralBrokenShardsIsStable(t *testing.T) {
	var notified atomic.Int32
	w := NewWatch(testSource, []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}, Config{PollInterval: time.Second, Notify: func() { notified.Add(1) }})
	w.lock.Lock()
	for i := range 4 {
		u := fmt.Sprintf("https://shard-%d", i)
		s := &shardWatch{url: u, cancel: func() {}}
		s.setListed()
		s.setError(fmt.Errorf("boom %d", i))
		w.shards[u] = s
	}
	w.state = w.shardState(State{Phase: PhaseSyncing, Shards: 4})
	w.lock.Unlock()
	first := w.State()
	if first.Phase != PhaseSyncing || !first.Listed || !strings.Contains(first.Message, "broke") {
		t.Fatalf("state %+v, want Syncing, listed, broken", first)
	}
	messages := map[string]bool{first.Message: true}
	for range 50 {
		w.refreshState()
		messages[w.State().Message] = true
	}
	if len(messages) != 1 || notified.Load() != 0 {
		t.Errorf("the state of unchanged shards changed %d times, with %d messages: %v", notified.Load(), len(messages), messages)
	}
}

// A source whose state is a problem (its rules have no effect) is not made
// Syncing or Synced by its reflectors.
func TestBrokenWatchesDoNotChangeOtherPhases(t *testing.T) {
	w := NewWatch(testSource, []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}, Config{PollInterval: time.Second, Notify: func() {}})
	s := &shardWatch{url: "https://shard-1", cancel: func() {}}
	w.lock.Lock()
	w.shards[s.url] = s
	w.state = State{Phase: PhaseAccessDenied, Message: "grant"}
	w.lock.Unlock()
	s.setListed()
	w.refreshState()
	s.setError(errors.New("boom"))
	w.refreshState()
	if state := w.State(); state.Phase != PhaseAccessDenied || state.Message != "grant" {
		t.Errorf("state %+v, want AccessDenied as before", state)
	}
}

// brokenVW serves the virtual workspace of one shard whose first watch
// breaks: every LIST answers one dependent; the first watch fails as
// failWatch says; every later request waits for release before it is
// answered (a watch then stays open).
type brokenVW struct {
	failWatch func(w http.ResponseWriter)
	release   chan struct{}

	lock     sync.Mutex
	requests []string
}

func (s *brokenVW) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	watching := r.URL.Query().Get("watch") == "true"
	kind := "list"
	if watching {
		kind = "watch"
	}
	s.lock.Lock()
	s.requests = append(s.requests, kind)
	n := len(s.requests)
	firstWatch := watching && n == 2
	s.lock.Unlock()
	if n > 2 {
		select {
		case <-s.release:
		case <-r.Context().Done():
			return
		}
	}
	switch {
	case firstWatch:
		s.failWatch(w)
	case watching:
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	default:
		fmt.Fprintf(w, `{"kind":"VirtualMachineList","metadata":{"resourceVersion":"10"},"items":[%s]}`, vmItem("c1", "vm-1", "vpc-a"))
	}
}

func (s *brokenVW) requested() []string {
	s.lock.Lock()
	defer s.lock.Unlock()
	return append([]string(nil), s.requests...)
}

// A reflector whose watch breaks makes the source Syncing, still Listed,
// saying the watch broke; once it watches or lists again the source is
// Synced again.
func TestAWatchThatBreaksMakesTheSourceSyncingUntilItRecovers(t *testing.T) {
	tests := []struct {
		name      string
		failWatch func(w http.ResponseWriter)
		wantError string
	}{
		{
			name: "the watch is refused (429); the reflector watches again",
			failWatch: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","message":"slow down","code":429}`)
			},
			wantError: "slow down",
		},
		{
			name: "the watch stream breaks mid-way",
			failWatch: func(w http.ResponseWriter) {
				w.WriteHeader(http.StatusOK)
				fmt.Fprint(w, `{"type":"ADDED","object":`+vmItem("c1", "vm-2", "vpc-b")+"}\n"+`!not json`)
			},
			wantError: "invalid character",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vws := &brokenVW{failWatch: tt.failWatch, release: make(chan struct{})}
			srv := httptest.NewServer(vws)
			defer srv.Close()
			w := NewWatch(testSource, []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}, Config{
				Clients: vw.NewClients(&rest.Config{}), PollInterval: time.Second, Notify: func() {},
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w.lock.Lock()
			w.ensureShards(ctx, []string{srv.URL}, true)
			w.state = w.shardState(State{Phase: PhaseSyncing, Shards: 1})
			w.lock.Unlock()

			waitFor(t, func() bool {
				s := w.State()
				return s.Phase == PhaseSyncing && s.Listed
			})
			state := w.State()
			if !strings.Contains(state.Message, "broke") || !strings.Contains(state.Message, tt.wantError) {
				t.Errorf("state after the watch broke: %+v; want a message saying it broke, with the error", state)
			}
			if !w.Store().Holds("c1") {
				t.Error("the store lost what was listed")
			}
			// Until the reflector lists or watches again, it stays so.
			time.Sleep(100 * time.Millisecond)
			if s := w.State(); s.Phase != PhaseSyncing || !s.Listed {
				t.Errorf("state while the reflector has not recovered: %+v", s)
			}

			close(vws.release)
			waitFor(t, func() bool { return w.State().Phase == PhaseSynced })
			if s := w.State(); !s.Listed || strings.Contains(s.Message, "broke") || strings.Contains(s.Message, tt.wantError) {
				t.Errorf("state after the reflector recovered: %+v", s)
			}
			if r := vws.requested(); len(r) < 3 || r[0] != "list" || r[1] != "watch" {
				t.Errorf("requests %v, want a list, the watch that broke, then another request", r)
			}
		})
	}
}

// Reinspect pokes Run at most once per reinspectInterval, however many
// requests find no shard serving a workspace.
func TestReinspectIsRateLimited(t *testing.T) {
	w := NewWatch(testSource, []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}, Config{PollInterval: time.Minute, Notify: func() {}})
	pokes := func() int {
		n := 0
		for {
			select {
			case <-w.poke:
				n++
			default:
				return n
			}
		}
	}
	for range 10 {
		w.Reinspect()
	}
	if got := pokes(); got != 1 {
		t.Fatalf("10 reinspections at once poked Run %d times, want 1", got)
	}
	w.Reinspect()
	if got := pokes(); got != 0 {
		t.Fatalf("a reinspection within the interval poked Run %d times, want 0", got)
	}
	w.lock.Lock()
	w.reinspected = w.reinspected.Add(-reinspectInterval)
	w.lock.Unlock()
	w.Reinspect()
	if got := pokes(); got != 1 {
		t.Fatalf("a reinspection after the interval poked Run %d times, want 1", got)
	}
}
