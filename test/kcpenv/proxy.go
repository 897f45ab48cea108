package kcpenv

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections on a local address to several backends in
// turn, as a Service in front of several replicas does: each connection goes
// to the next backend that accepts it. It passes TLS through untouched.
type Proxy struct {
	// Addr is the address it listens on.
	Addr string

	backends []string
	// ready, if set, tells whether a backend may get new connections, as
	// a Service sends only to ready endpoints.
	ready    func(backend string) bool
	listener net.Listener
	next     atomic.Uint64
	wg       sync.WaitGroup
	lock     sync.Mutex
	conns    map[net.Conn]bool
}

// StartProxy listens on a free port of 127.0.0.1 and forwards to backends.
func StartProxy(backends ...string) (*Proxy, error) {
	return StartReadyProxy("127.0.0.1:0", nil, backends...)
}

// StartReadyProxy listens on addr and forwards new connections only to the
// backends that ready (if not nil) reports ready, as a Service does.
func StartReadyProxy(addr string, ready func(backend string) bool, backends ...string) (*Proxy, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: l.Addr().String(), backends: backends, ready: ready, listener: l, conns: map[net.Conn]bool{}}
	p.wg.Go(p.serve)
	return p, nil
}

func (p *Proxy) serve() {
	for {
		conn, err := p.listener.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.forward(conn) })
	}
}

// forward connects conn to the first backend, in turn, that accepts a
// connection, and copies both ways until either side closes.
func (p *Proxy) forward(conn net.Conn) {
	if !p.track(conn, true) {
		return
	}
	defer p.track(conn, false)
	start := p.next.Add(1)
	var upstream net.Conn
	for i := range p.backends {
		backend := p.backends[(int(start)+i)%len(p.backends)]
		if p.ready != nil && !p.ready(backend) {
			continue
		}
		c, err := net.DialTimeout("tcp", backend, time.Second)
		if err == nil {
			upstream = c
			break
		}
	}
	if upstream == nil || !p.track(upstream, true) {
		if upstream != nil {
			_ = upstream.Close()
		}
		return
	}
	defer p.track(upstream, false)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Closing both ends ends the other direction too.
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(upstream, conn)
	go pipe(conn, upstream)
	<-done
	<-done
}

// track registers (or forgets and closes) a connection; it reports false if
// the proxy is stopped.
func (p *Proxy) track(c net.Conn, add bool) bool {
	p.lock.Lock()
	defer p.lock.Unlock()
	if !add {
		delete(p.conns, c)
		_ = c.Close()
		return true
	}
	if p.conns == nil {
		_ = c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

// Stop closes the listener and every connection, and waits for the
// forwarding to end.
func (p *Proxy) Stop() error {
	err := p.listener.Close()
	p.lock.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.lock.Unlock()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
