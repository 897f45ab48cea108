package store

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

func TestProgress(t *testing.T) {
	// step is what the reflector of one shard hands the store: a complete
	// list at a version, or an event or bookmark at one.
	type step struct {
		list bool
		rv   string
	}
	tests := []struct {
		name   string
		steps  []step
		want   uint64
		wantOK bool
	}{
		{name: "nothing stored yet"},
		{name: "a list", steps: []step{{true, "100"}}, want: 100, wantOK: true},
		{name: "events move it forward", steps: []step{{true, "100"}, {false, "105"}, {false, "107"}}, want: 107, wantOK: true},
		{name: "an older event does not move it back", steps: []step{{true, "100"}, {false, "105"}, {false, "103"}}, want: 105, wantOK: true},
		{name: "a relist sets it exactly", steps: []step{{true, "100"}, {false, "105"}, {true, "104"}}, want: 104, wantOK: true},
		{name: "a version that is not a number resets it", steps: []step{{true, "100"}, {true, "x"}}},
		{name: "an event before any list", steps: []step{{false, "100"}}, want: 100, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(nil)
			shard := s.ForShard("https://shard-1", func() {})
			for _, st := range tt.steps {
				if st.list {
					if err := shard.Replace(nil, st.rv); err != nil {
						t.Fatal(err)
					}
				} else {
					shard.(cache.ResourceVersionUpdater).UpdateResourceVersion(st.rv)
				}
			}
			rv, _, ok := s.Progress("https://shard-1")
			if rv != tt.want || ok != tt.wantOK {
				t.Errorf("Progress() = %d, %v; want %d, %v", rv, ok, tt.want, tt.wantOK)
			}
			if _, _, ok := s.Progress("https://shard-2"); ok {
				t.Error("Progress() of another shard is known")
			}
		})
	}
}

func TestWaitProgress(t *testing.T) {
	s := New(nil)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	shard := s.ForShard("https://shard-1", func() {})
	if err := shard.Replace(nil, "100"); err != nil {
		t.Fatal(err)
	}
	if _, at, _ := s.Progress("https://shard-1"); !at.Equal(now) {
		t.Errorf("Progress() at %s, want %s", at, now)
	}
	ctx := context.Background()
	if !s.WaitProgress(ctx, "https://shard-1", 100) {
		t.Error("WaitProgress(100) at 100 = false")
	}

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if s.WaitProgress(short, "https://shard-1", 101) {
		t.Error("WaitProgress(101) at 100 = true")
	}

	// It returns once the reflector stores a later event.
	done := make(chan bool)
	go func() { done <- s.WaitProgress(ctx, "https://shard-1", 103) }()
	shard.(cache.ResourceVersionUpdater).UpdateResourceVersion("102")
	select {
	case <-done:
		t.Fatal("WaitProgress(103) returned at 102")
	case <-time.After(20 * time.Millisecond):
	}
	shard.(cache.ResourceVersionUpdater).UpdateResourceVersion("103")
	if !<-done {
		t.Error("WaitProgress(103) at 103 = false")
	}

	// A shard that is dropped while waiting, or unknown, never catches up.
	go func() { done <- s.WaitProgress(ctx, "https://shard-1", 200) }()
	time.Sleep(10 * time.Millisecond)
	s.DropShard("https://shard-1")
	if <-done {
		t.Error("WaitProgress() of a dropped shard = true")
	}
	if s.WaitProgress(ctx, "https://shard-2", 1) {
		t.Error("WaitProgress() of an unknown shard = true")
	}
}
