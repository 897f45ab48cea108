package kcpenv

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
)

// WatchBreaker breaks, on demand, the requests of a client whose path
// contains a substring: it refuses new ones and cuts the responses in
// flight (a watch stream ends with an error). Set Wrap as the
// rest.Config's WrapTransport. The webhook's index lists and watches
// dependents across all workspaces (/clusters/*/...), while its live reads
// name one workspace, so breaking "/clusters/*/" breaks the index's
// watches and nothing else.
type WatchBreaker struct {
	// Match is the substring of the paths that break.
	Match string

	lock   sync.Mutex
	broken bool
	open   map[*breakableBody]struct{}
}

// errBroken is what broken requests fail with.
var errBroken = errors.New("connection broken by the test")

// Wrap wraps a transport.
func (b *WatchBreaker) Wrap(rt http.RoundTripper) http.RoundTripper {
	return RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if !strings.Contains(req.URL.Path, b.Match) {
			return rt.RoundTrip(req)
		}
		b.lock.Lock()
		broken := b.broken
		b.lock.Unlock()
		if broken {
			return nil, errBroken
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		body := &breakableBody{ReadCloser: resp.Body, breaker: b}
		b.lock.Lock()
		if b.open == nil {
			b.open = map[*breakableBody]struct{}{}
		}
		b.open[body] = struct{}{}
		b.lock.Unlock()
		resp.Body = body
		return resp, nil
	})
}

// Break refuses matching requests from now on and cuts those in flight.
func (b *WatchBreaker) Break() {
	b.lock.Lock()
	defer b.lock.Unlock()
	b.broken = true
	for body := range b.open {
		_ = body.ReadCloser.Close()
	}
	b.open = nil
}

// Mend lets matching requests through again.
func (b *WatchBreaker) Mend() {
	b.lock.Lock()
	defer b.lock.Unlock()
	b.broken = false
}

// breakableBody is a response body that Break can cut.
type breakableBody struct {
	io.ReadCloser
	breaker *WatchBreaker
}

func (b *breakableBody) Close() error {
	b.breaker.lock.Lock()
	delete(b.breaker.open, b)
	b.breaker.lock.Unlock()
	return b.ReadCloser.Close()
}

// RoundTripperFunc is an http.RoundTripper made of a function: what a
// test wraps a client's transport with (see rest.Config.WrapTransport).
type RoundTripperFunc func(*http.Request) (*http.Response, error)

// RoundTrip implements http.RoundTripper.
func (f RoundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
