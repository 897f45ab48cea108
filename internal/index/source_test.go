package index

import (
	"testing"
	"time"
)

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
		{"a shard added applies at once", []step{
			{0, State{Phase: PhaseSyncing}, append(urls, "https://shard-3"), true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sw := &sourceWatch{ix: &Index{opts: Options{PollInterval: poll}}, urls: urls}
			start := time.Now()
			for i, s := range tt.steps {
				if got := sw.confirmShrink(s.state, s.urls, start.Add(s.after)); got != s.apply {
					t.Errorf("step %d (%s after %s): confirmShrink() = %v, want %v", i, s.state.Phase, s.after, got, s.apply)
				}
			}
		})
	}
}
