// Package cabundle keeps the contents of a PEM CA bundle file current, so that
// a rotated bundle (for example a re-mounted Secret) takes effect without a
// restart: in the webhook configurations the controller writes, and in the
// client CAs the webhook accepts.
package cabundle

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Watcher re-reads a CA bundle file periodically. It is a manager.Runnable.
type Watcher struct {
	path     string
	interval time.Duration
	current  atomic.Pointer[[]byte]
	changes  chan event.GenericEvent
}

// New reads the bundle at path and returns a Watcher that re-reads it every
// interval once started. It fails if the file cannot be read or holds no
// valid PEM certificate.
func New(path string, interval time.Duration) (*Watcher, error) {
	w := &Watcher{path: path, interval: interval, changes: make(chan event.GenericEvent, 1)}
	bundle, err := Read(path)
	if err != nil {
		return nil, err
	}
	w.current.Store(&bundle)
	return w, nil
}

// Read reads and validates a PEM CA bundle: it must contain at least one
// certificate and nothing that is not a certificate.
func Read(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read CA bundle: %w", err)
	}
	rest, n := raw, 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("CA bundle %s contains a %q PEM block; only certificates are allowed", path, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("CA bundle %s contains an invalid certificate: %w", path, err)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("CA bundle %s contains no PEM certificate", path)
	}
	return raw, nil
}

// Bundle returns the current contents of the bundle.
func (w *Watcher) Bundle() []byte {
	return *w.current.Load()
}

// Changes receives an event whenever the bundle changes.
func (w *Watcher) Changes() <-chan event.GenericEvent {
	return w.changes
}

// Start re-reads the bundle every interval until ctx is done. A file that
// is unreadable or invalid keeps the previous bundle and is logged.
func (w *Watcher) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("ca-bundle").WithValues("path", w.path)
	_ = wait.PollUntilContextCancel(ctx, w.interval, false, func(context.Context) (bool, error) {
		w.reload(logger)
		return false, nil
	})
	return nil
}

// reload re-reads the bundle and announces a change.
func (w *Watcher) reload(logger logr.Logger) {
	bundle, err := Read(w.path)
	if err != nil {
		logger.Error(err, "Keeping the previous CA bundle")
		return
	}
	if bytes.Equal(bundle, w.Bundle()) {
		return
	}
	w.current.Store(&bundle)
	logger.Info("CA bundle changed; rolling it out")
	select {
	case w.changes <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: w.path}}}:
	default: // a change is already pending
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica keeps its bundle current.
func (w *Watcher) NeedLeaderElection() bool {
	return false
}
