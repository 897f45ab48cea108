package references

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestEach(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name  string
		n     int
		limit int
		// fail is the call that fails (-1: none); the calls after it wait
		// until it cancels them.
		fail int
		// cancelled: ctx has ended before each is called.
		cancelled bool
		wantI     int
		wantErr   error
		// wantCalls bounds the calls made: exactly, unless wantAtMost.
		wantCalls  int
		wantAtMost bool
	}{
		{name: "no calls", n: 0, limit: 4, fail: -1, wantI: -1},
		{name: "one call, made in place", n: 1, limit: 4, fail: -1, wantI: -1, wantCalls: 1},
		{name: "every call, at most limit at once", n: 100, limit: 8, fail: -1, wantI: -1, wantCalls: 100},
		{name: "a limit below one is one", n: 10, limit: 0, fail: -1, wantI: -1, wantCalls: 10},
		{name: "the one call fails", n: 1, limit: 4, fail: 0, wantI: 0, wantErr: boom, wantCalls: 1},
		{name: "a failure is returned with its call, and the calls not started are not made", n: 1000, limit: 4, fail: 10, wantI: 10, wantErr: boom,
			wantCalls: 100, wantAtMost: true},
		{name: "nothing is called once the context has ended", n: 50, limit: 4, fail: -1, cancelled: true, wantErr: context.Canceled, wantCalls: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelled {
				cancel()
			}
			var (
				calls, running, most atomic.Int32
				lock                 sync.Mutex
				seen                 = map[int]bool{}
			)
			i, err := each(ctx, tt.n, tt.limit, func(ctx context.Context, i int) error {
				calls.Add(1)
				now := running.Add(1)
				defer running.Add(-1)
				for {
					m := most.Load()
					if now <= m || most.CompareAndSwap(m, now) {
						break
					}
				}
				lock.Lock()
				if seen[i] {
					t.Errorf("call %d made twice", i)
				}
				seen[i] = true
				lock.Unlock()
				if i == tt.fail {
					return boom
				}
				if tt.fail >= 0 && i > tt.fail {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(10 * time.Second):
						t.Error("a failure did not cancel the other calls")
					}
				}
				return nil
			})
			if !errors.Is(err, tt.wantErr) || tt.wantErr == nil && err != nil {
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil && !tt.cancelled && i != tt.wantI || tt.wantErr == nil && i != -1 {
				t.Errorf("failed call %d, want %d", i, tt.wantI)
			}
			if got := int(calls.Load()); tt.wantAtMost && got > tt.wantCalls || !tt.wantAtMost && got != tt.wantCalls {
				t.Errorf("%d calls, want %d (at most: %v)", got, tt.wantCalls, tt.wantAtMost)
			}
			if limit := int32(max(tt.limit, 1)); most.Load() > limit {
				t.Errorf("%d calls at once, want at most %d", most.Load(), limit)
			}
		})
	}
}
