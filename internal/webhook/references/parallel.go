package references

import (
	"context"
	"errors"

	"golang.org/x/sync/errgroup"
)

// DefaultConcurrency is how many of the targets a request adds references
// to are read (by the ReferenceValidator) or recorded (by the
// LabelMutator) at once. The reads and writes of one request are
// independent round trips through the protected provider's virtual
// workspace: one at a time, a request with 1,000 new references took
// several times kcp's timeout. On a kcp with two cores, 32 at once get the
// most writes through (about 250 a second; 16 about as many, 64 fewer), a
// kcp with more cores answers them faster, and a request with a handful
// of references costs what it did.
const DefaultConcurrency = 32

// each calls do for every i in [0, n), at most limit (at least 1) at a
// time, and returns once every call has returned: -1 and nil if every call
// succeeded, else the i and error of the first call that failed. That
// failure cancels the context of the others, and the calls not made yet
// are not made: they fail with the context's error, as they do once ctx
// has ended.
func each(ctx context.Context, n, limit int, do func(ctx context.Context, i int) error) (int, error) {
	if n == 1 {
		// The common case, without a goroutine.
		if err := do(ctx, 0); err != nil {
			return 0, err
		}
		return -1, nil
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(limit, 1))
	for i := range n {
		g.Go(func() error {
			err := ctx.Err()
			if err == nil {
				err = do(ctx, i)
			}
			if err != nil {
				return failure{i: i, err: err}
			}
			return nil
		})
	}
	var f failure
	if err := g.Wait(); errors.As(err, &f) {
		return f.i, f.err
	}
	return -1, nil
}

// failure is the error of the call of each for i.
type failure struct {
	i   int
	err error
}

func (f failure) Error() string { return f.err.Error() }

func (f failure) Unwrap() error { return f.err }
