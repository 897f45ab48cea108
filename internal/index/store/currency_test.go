package store

import (
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

// The currency of a shard is the latest sample whose resourceVersion the
// reflector has passed: with a list, an event or a bookmark; a relist
// from an older version takes it back, and a dropped shard has none.
func TestCurrency(t *testing.T) {
	const shard = "https://shard-1"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// step is one thing that happens to the shard: the reflector stores a
	// list, an event or a bookmark at rv ("list", "event", "bookmark"), a
	// sample sent at second sentAt is served at rv ("sample"), or the
	// shard is dropped ("drop").
	type step struct {
		do     string
		rv     string
		sentAt int
	}
	tests := []struct {
		name   string
		steps  []step
		want   int // seconds after t0
		wantOK bool
	}{
		{name: "nothing known"},
		{name: "samples without a list", steps: []step{{do: "sample", rv: "100", sentAt: 1}}},
		{name: "a list without samples", steps: []step{{do: "list", rv: "100"}}},
		{name: "a list past a sample", steps: []step{{do: "sample", rv: "90", sentAt: 1}, {do: "list", rv: "100"}}, want: 1, wantOK: true},
		{name: "a sample at the list's version", steps: []step{{do: "list", rv: "100"}, {do: "sample", rv: "100", sentAt: 2}}, want: 2, wantOK: true},
		{name: "quiet: samples ahead of the reflector count only once it passes them", steps: []step{
			{do: "sample", rv: "100", sentAt: 1}, {do: "list", rv: "100"},
			{do: "sample", rv: "110", sentAt: 3}, {do: "sample", rv: "120", sentAt: 5},
		}, want: 1, wantOK: true},
		{name: "busy: an event passes the samples before it", steps: []step{
			{do: "list", rv: "100"}, {do: "sample", rv: "100", sentAt: 1},
			{do: "sample", rv: "110", sentAt: 3}, {do: "sample", rv: "120", sentAt: 5},
			{do: "event", rv: "115"},
		}, want: 3, wantOK: true},
		{name: "a bookmark passes them too", steps: []step{
			{do: "list", rv: "100"}, {do: "sample", rv: "110", sentAt: 3}, {do: "sample", rv: "120", sentAt: 5},
			{do: "bookmark", rv: "120"},
		}, want: 5, wantOK: true},
		{name: "the latest sample passed counts, in whatever order they came", steps: []step{
			{do: "list", rv: "200"}, {do: "sample", rv: "150", sentAt: 7}, {do: "sample", rv: "120", sentAt: 5},
		}, want: 7, wantOK: true},
		{name: "an older event does not take it back", steps: []step{
			{do: "list", rv: "100"}, {do: "sample", rv: "110", sentAt: 3}, {do: "event", rv: "115"}, {do: "event", rv: "105"},
		}, want: 3, wantOK: true},
		{name: "a relist from an older version takes it back", steps: []step{
			{do: "list", rv: "100"}, {do: "sample", rv: "95", sentAt: 1}, {do: "sample", rv: "110", sentAt: 3},
			{do: "event", rv: "115"}, {do: "list", rv: "105"},
		}, want: 1, wantOK: true},
		{name: "a relist from before every sample leaves none", steps: []step{
			{do: "list", rv: "100"}, {do: "sample", rv: "100", sentAt: 1}, {do: "list", rv: "90"},
		}},
		{name: "a list at a version that is not a number", steps: []step{
			{do: "list", rv: "100"}, {do: "sample", rv: "100", sentAt: 1}, {do: "list", rv: "x"},
		}},
		{name: "samples that are not numbers are ignored", steps: []step{
			{do: "list", rv: "100"}, {do: "sample", rv: "90", sentAt: 1}, {do: "sample", rv: "x", sentAt: 3}, {do: "sample", rv: "", sentAt: 4},
		}, want: 1, wantOK: true},
		{name: "a dropped shard has none", steps: []step{
			{do: "list", rv: "100"}, {do: "sample", rv: "100", sentAt: 1}, {do: "drop"},
		}},
		{name: "nor once listed again, until a new sample", steps: []step{
			{do: "list", rv: "100"}, {do: "sample", rv: "100", sentAt: 1}, {do: "drop"}, {do: "list", rv: "100"},
		}},
		{name: "only the last samples are kept", steps: func() []step {
			steps := []step{{do: "list", rv: "100"}, {do: "sample", rv: "100", sentAt: 1}}
			for i := range keptSamples {
				steps = append(steps, step{do: "sample", rv: strconv.Itoa(200 + i), sentAt: 10 + i})
			}
			return steps
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(nil)
			r := s.ForShard(shard, func() {})
			for _, st := range tt.steps {
				switch st.do {
				case "list":
					if err := r.Replace(nil, st.rv); err != nil {
						t.Fatal(err)
					}
				case "event":
					add(t, r, &Object{})
					r.(cache.ResourceVersionUpdater).UpdateResourceVersion(st.rv)
				case "bookmark":
					r.(cache.ResourceVersionUpdater).UpdateResourceVersion(st.rv)
				case "sample":
					s.Sampled(shard, at(st.sentAt), st.rv)
				case "drop":
					s.DropShard(shard)
				}
			}
			got, ok := s.Currency(shard)
			if ok != tt.wantOK || (ok && !got.Equal(at(tt.want))) {
				t.Errorf("Currency() = %s, %v; want %s, %v", got, ok, at(tt.want), tt.wantOK)
			}
			if _, ok := s.Currency("https://shard-2"); ok {
				t.Error("the currency of another shard is known")
			}
		})
	}
}

// A bookmark moves the progress, not the time it last stored something:
// a quiet watch that gets bookmarks every few seconds is not busy.
func TestBookmarksDoNotMakeAShardBusy(t *testing.T) {
	s := New(nil)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	r := s.ForShard("https://shard-1", func() {})
	if err := r.Replace(nil, "100"); err != nil {
		t.Fatal(err)
	}
	listed := now
	now = now.Add(time.Minute)
	r.(cache.ResourceVersionUpdater).UpdateResourceVersion("120")
	if rv, at, _ := s.Progress("https://shard-1"); rv != 120 || !at.Equal(listed) {
		t.Errorf("after a bookmark: Progress() = %d at %s, want 120 at the list's time %s", rv, at, listed)
	}
	now = now.Add(time.Minute)
	add(t, r, &Object{Cluster: "c1"})
	r.(cache.ResourceVersionUpdater).UpdateResourceVersion("130")
	if rv, at, _ := s.Progress("https://shard-1"); rv != 130 || !at.Equal(now) {
		t.Errorf("after an event: Progress() = %d at %s, want 130 at %s", rv, at, now)
	}
	now = now.Add(time.Minute)
	if err := r.Delete(&Object{Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	r.(cache.ResourceVersionUpdater).UpdateResourceVersion("140")
	r.(cache.ResourceVersionUpdater).UpdateResourceVersion("150") // a bookmark after it
	if rv, at, _ := s.Progress("https://shard-1"); rv != 150 || !at.Equal(now) {
		t.Errorf("after a delete and a bookmark: Progress() = %d at %s, want 150 at the delete's time %s", rv, at, now)
	}
}

// While a relist from an older version replaces the objects, the progress
// (and with it the currency) never claims more than the store holds: Replace
// lowers it before the objects go back, and only lowers it.
func TestLowerProgress(t *testing.T) {
	s := New(nil)
	r := s.ForShard("https://shard-1", func() {})
	if err := r.Replace(nil, "100"); err != nil {
		t.Fatal(err)
	}
	add(t, r, &Object{Cluster: "c1"})
	r.(cache.ResourceVersionUpdater).UpdateResourceVersion("120")
	s.lowerProgress("https://shard-1", "110")
	if rv, _, _ := s.Progress("https://shard-1"); rv != 110 {
		t.Errorf("lowerProgress(110) at 120: %d", rv)
	}
	s.lowerProgress("https://shard-1", "130")
	if rv, _, _ := s.Progress("https://shard-1"); rv != 110 {
		t.Errorf("lowerProgress(130) at 110 raised it: %d", rv)
	}
	s.lowerProgress("https://shard-1", "x")
	if _, _, ok := s.Progress("https://shard-1"); ok {
		t.Error("lowerProgress() of a version that is not a number left a progress")
	}
	s.lowerProgress("https://shard-2", "1")
	if _, _, ok := s.Progress("https://shard-2"); ok {
		t.Error("lowerProgress of an unknown shard made it known")
	}
}
