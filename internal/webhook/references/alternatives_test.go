package references

import (
	"context"
	"errors"
	"testing"
	"time"
)

// References that name one object under two exports of one resource: once
// one finds the object, the other is cut short and its error does not
// count; while none has, every outcome and error counts.
func TestAlternatives(t *testing.T) {
	other := otherTargetSource
	added := []reference{
		{target: targetSource, namespace: "default", name: "vpc-a"},
		{target: other, namespace: "default", name: "vpc-a"},
		{target: targetSource, namespace: "default", name: "vpc-b"},
	}
	found := func(context.Context) (bool, error) { return true, nil }
	missing := func(context.Context) (bool, error) { return false, nil }
	failed := func(context.Context) (bool, error) { return false, errors.New("forbidden") }
	// settling waits, as a read of a workspace that does not bind the
	// export does, until its context ends.
	settling := func(ctx context.Context) (bool, error) {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(10 * time.Second):
			return false, errors.New("not cut short")
		}
	}

	t.Run("only references with alternatives are grouped", func(t *testing.T) {
		alt, release := alternativesOf(context.Background(), added)
		defer release()
		if alt.group(0) == nil || alt.group(0) != alt.group(1) || alt.group(2) != nil {
			t.Errorf("groups %v", alt.of)
		}
		if alt, _ := alternativesOf(context.Background(), added[2:]); alt.group(0) != nil {
			t.Errorf("a reference without alternatives is grouped")
		}
		// A reference without alternatives returns its error at once.
		if _, err := alt.do(context.Background(), 2, func(context.Context) (bool, error) { return false, errors.New("forbidden") }); err == nil {
			t.Errorf("the error of a reference without alternatives was not returned")
		}
	})

	tests := []struct {
		name         string
		first        func(context.Context) (bool, error)
		second       func(context.Context) (bool, error)
		cancel       bool
		wantResolved bool
		wantErr      bool
		wantCut      bool // the second
	}{
		{name: "found under one: the other is cut short, and names nothing", first: found, second: settling, wantResolved: true, wantCut: true},
		{name: "found under one: the other's error does not count", first: found, second: failed, wantResolved: true},
		{name: "missing under both", first: missing, second: missing},
		{name: "found under none: the error counts", first: missing, second: failed, wantErr: true},
		{name: "the request ends: the error counts", first: settling, second: settling, cancel: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			alt, release := alternativesOf(ctx, added)
			defer release()
			g := alt.group(0)
			done := make(chan error, 1)
			var cut bool
			go func() {
				var err error
				cut, err = alt.do(ctx, 1, tt.second)
				done <- err
			}()
			if tt.cancel {
				cancel()
			}
			_, firstErr := alt.do(ctx, 0, tt.first)
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the second reference was not cut short")
			}
			if firstErr != nil || err != nil {
				t.Errorf("do returned %v, %v: the errors of references with alternatives are kept for firstError", firstErr, err)
			}
			if g.resolved() != tt.wantResolved {
				t.Errorf("resolved = %v, want %v", g.resolved(), tt.wantResolved)
			}
			// As mark and checkTargets count them: once all have returned.
			if _, counted := alt.firstError(); (counted != nil) != tt.wantErr {
				t.Errorf("counted %v, want an error counted: %v", counted, tt.wantErr)
			}
			if tt.wantCut && !cut {
				t.Errorf("the second was not cut short")
			}
		})
	}
}
