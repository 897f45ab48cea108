package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// withAdmission returns a dependent named name in c1 that carries the
// admission label with value id (none if empty).
func withAdmission(t testing.TB, name, id string) *Object {
	t.Helper()
	labels := ""
	if id != "" {
		labels = fmt.Sprintf(`,"labels":{"dependencies.opendefense.cloud/admission":%q}`, id)
	}
	o, err := Decode([]byte(fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"default","annotations":{"kcp.io/cluster":"c1"}%s},"spec":{}}`, name, labels)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// fakeClock is a settable Store.now.
type fakeClock struct {
	lock sync.Mutex
	t    time.Time
}

func (c *fakeClock) now() time.Time {
	c.lock.Lock()
	defer c.lock.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.lock.Lock()
	defer c.lock.Unlock()
	c.t = c.t.Add(d)
}

// The store remembers the admission ids of every dependent it stores,
// lists or sees deleted, from when it first saw each, for the admission
// memory.
func TestAdmitted(t *testing.T) {
	const (
		id1 = "0123456789abcdef"
		id2 = "fedcba9876543210"
		id3 = "00000000000000ff"
	)
	// step: the reflector hands the store a dependent carrying id with
	// "list" (a complete list of it), "add", "update" or "delete", or the
	// clock moves on by after.
	type step struct {
		do    string
		id    string
		after time.Duration
	}
	tests := []struct {
		name   string
		steps  []step
		memory time.Duration
		// want maps ids to when they were first seen (after the start),
		// missing for those not remembered.
		want map[string]time.Duration
	}{
		{name: "nothing seen", want: map[string]time.Duration{}},
		{name: "a listed dependent", steps: []step{{do: "list", id: id1}}, want: map[string]time.Duration{id1: 0}},
		{name: "an added dependent", steps: []step{{do: "add", id: id1}}, want: map[string]time.Duration{id1: 0}},
		{name: "an updated dependent", steps: []step{{do: "update", id: id2}}, want: map[string]time.Duration{id2: 0}},
		{name: "a deleted dependent", steps: []step{{do: "delete", id: id3}}, want: map[string]time.Duration{id3: 0}},
		{name: "first seen counts", steps: []step{
			{do: "add", id: id1}, {after: time.Minute}, {do: "update", id: id1}, {do: "add", id: id2}, {after: time.Minute}, {do: "list", id: id2},
		}, want: map[string]time.Duration{id1: 0, id2: time.Minute}},
		{name: "upper case hex is the same id", steps: []step{{do: "add", id: "0123456789ABCDEF"}}, want: map[string]time.Duration{id1: 0}},
		{name: "forgotten after the memory", steps: []step{
			{do: "add", id: id1}, {after: 5 * time.Minute}, {do: "add", id: id2}, {after: 5 * time.Minute},
		}, want: map[string]time.Duration{id2: 5 * time.Minute}},
		{name: "a shorter memory", memory: time.Minute, steps: []step{
			{do: "add", id: id1}, {after: 30 * time.Second}, {do: "add", id: id2}, {after: 30 * time.Second},
		}, want: map[string]time.Duration{id2: 30 * time.Second}},
		{name: "seen again once forgotten, first seen anew", steps: []step{
			{do: "add", id: id1}, {after: 11 * time.Minute}, {do: "update", id: id1},
		}, want: map[string]time.Duration{id1: 11 * time.Minute}},
		{name: "values that are not ids are ignored", steps: []step{
			{do: "add", id: "0123"}, {do: "add", id: "0123456789abcdeg"}, {do: "add", id: "0123456789abcdef0"},
			{do: "add", id: "+123456789abcdef"}, {do: "add", id: "0x23456789abcdef"}, {do: "add"},
		}, want: map[string]time.Duration{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			start := clock.now()
			s := New(nil)
			s.now = clock.now
			s.SetAdmissionMemory(tt.memory)
			r := s.ForShard("https://shard-1", func() {})
			for i, st := range tt.steps {
				o := withAdmission(t, fmt.Sprintf("vm-%d", i), st.id)
				var err error
				switch st.do {
				case "list":
					err = r.Replace([]any{o, withAdmission(t, "other", "")}, "10")
				case "add":
					err = r.Add(o)
				case "update":
					err = r.Update(o)
				case "delete":
					err = r.Delete(o)
				default:
					clock.advance(st.after)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range []string{id1, id2, id3} {
				at, ok := s.Admitted(id)
				want, wantOK := tt.want[id]
				if ok != wantOK || (ok && !at.Equal(start.Add(want))) {
					t.Errorf("Admitted(%s) = %s, %v; want %s, %v", id, at, ok, start.Add(want), wantOK)
				}
			}
			if got := len(s.admissions.first); got != len(tt.want) {
				t.Errorf("%d ids remembered, want %d", got, len(tt.want))
			}
			if _, ok := s.Admitted("not an id"); ok {
				t.Error("Admitted() of a value that is not an id")
			}
		})
	}
}

// The store remembers at most maxAdmissions ids, forgetting those first
// seen first; the queue behind it does not grow without bound.
func TestAdmittedIsBounded(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := New(nil)
	s.now = clock.now
	ids := make([]string, 0, maxAdmissions+10)
	for i := range maxAdmissions + 10 {
		ids = append(ids, fmt.Sprintf("%016x", i))
	}
	s.admitted(nil, ids...)
	if n := len(s.admissions.first); n != maxAdmissions {
		t.Errorf("%d ids remembered, want %d", n, maxAdmissions)
	}
	if _, ok := s.Admitted(ids[9]); ok {
		t.Error("one of the first ids is remembered beyond the bound")
	}
	if _, ok := s.Admitted(ids[10]); !ok {
		t.Error("the oldest id within the bound is forgotten")
	}
	// Forgetting them all leaves the queue small.
	clock.advance(DefaultAdmissionMemory)
	s.admitted(nil, "0123456789abcdef")
	if n, q := len(s.admissions.first), len(s.admissions.order)-s.admissions.head; n != 1 || q != 1 || cap(s.admissions.order) > 64 {
		t.Errorf("after the memory: %d ids, %d queued, queue capacity %d", n, q, cap(s.admissions.order))
	}
}

// WaitAdmitted returns once the store sees the id, and gives up when its
// context ends; a value that is not an id never comes.
func TestWaitAdmitted(t *testing.T) {
	const id = "0123456789abcdef"
	s := New(nil)
	r := s.ForShard("https://shard-1", func() {})
	ctx := context.Background()

	if _, ok := s.WaitAdmitted(ctx, "not an id"); ok {
		t.Error("WaitAdmitted() of a value that is not an id = true")
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, ok := s.WaitAdmitted(short, id); ok {
		t.Error("WaitAdmitted() of an id never seen = true")
	}

	type result struct {
		at time.Time
		ok bool
	}
	done := make(chan result)
	for range 3 {
		go func() {
			at, ok := s.WaitAdmitted(ctx, id)
			done <- result{at, ok}
		}()
	}
	time.Sleep(10 * time.Millisecond)
	// Another id, and a dependent without one, do not end the wait.
	add(t, r, withAdmission(t, "vm-0", "fedcba9876543210"))
	add(t, r, withAdmission(t, "vm-1", ""))
	select {
	case res := <-done:
		t.Fatalf("WaitAdmitted() returned %v before the id was seen", res)
	case <-time.After(20 * time.Millisecond):
	}
	before := time.Now()
	if err := r.Delete(withAdmission(t, "vm-2", id)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		res := <-done
		if !res.ok || res.at.Before(before) || res.at.After(time.Now()) {
			t.Errorf("WaitAdmitted() = %v, want when the delete was stored", res)
		}
	}
	// Seen already: at once.
	if at, ok := s.WaitAdmitted(ctx, id); !ok || at.Before(before) {
		t.Errorf("WaitAdmitted() of an id seen = %s, %v", at, ok)
	}
}

// A store that replaces another remembers what the other had seen, as
// first seen when it was.
func TestAdoptAdmissions(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	old, s := New(nil), New(nil)
	old.now, s.now = clock.now, clock.now
	old.admitted(nil, "0123456789abcdef")
	clock.advance(time.Minute)
	s.admitted(nil, "fedcba9876543210")
	old.admitted(nil, "fedcba9876543210", "00000000000000ff")

	waited := make(chan bool)
	go func() {
		_, ok := s.WaitAdmitted(context.Background(), "00000000000000ff")
		waited <- ok
	}()
	time.Sleep(10 * time.Millisecond)
	s.AdoptAdmissions(old)
	s.AdoptAdmissions(s)
	if !<-waited {
		t.Error("a waiter was not woken by the adopted ids")
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for id, want := range map[string]time.Time{"0123456789abcdef": start, "fedcba9876543210": start.Add(time.Minute), "00000000000000ff": start.Add(time.Minute)} {
		if at, ok := s.Admitted(id); !ok || !at.Equal(want) {
			t.Errorf("Admitted(%s) = %s, %v; want %s", id, at, ok, want)
		}
	}
	// The adopted ids are forgotten when they would have been.
	clock.advance(DefaultAdmissionMemory - time.Minute)
	if _, ok := s.Admitted("0123456789abcdef"); ok {
		t.Error("an adopted id outlived the memory")
	}
	if _, ok := s.Admitted("fedcba9876543210"); !ok {
		t.Error("an id forgotten early")
	}
}
