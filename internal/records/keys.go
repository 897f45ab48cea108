package records

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
)

// MinKeyLength is the least number of bytes of a key.
const MinKeyLength = 32

// Key is a secret that signs or verifies records.
type Key struct {
	// ID names the key in the records it signs.
	ID string
	// Secret is the HMAC key.
	Secret []byte
}

// Keyring holds the keys that verify records and the one that signs them.
type Keyring struct {
	signer Key
	keys   map[string][]byte
}

// NewKeyring returns a keyring of keys (at least one); the key with the
// greatest ID signs, every key verifies. IDs must be unique and secrets at
// least MinKeyLength bytes.
func NewKeyring(keys []Key) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("no key")
	}
	k := &Keyring{keys: map[string][]byte{}}
	for _, key := range keys {
		switch {
		case key.ID == "" || strings.ContainsAny(key.ID, " \t\n\""):
			return nil, fmt.Errorf("invalid key ID %q", key.ID)
		case len(key.Secret) < MinKeyLength:
			return nil, fmt.Errorf("key %q has %d bytes; at least %d are needed", key.ID, len(key.Secret), MinKeyLength)
		}
		if _, dup := k.keys[key.ID]; dup {
			return nil, fmt.Errorf("key %q appears twice", key.ID)
		}
		k.keys[key.ID] = slices.Clone(key.Secret)
		if key.ID > k.signer.ID {
			k.signer = Key{ID: key.ID, Secret: k.keys[key.ID]}
		}
	}
	return k, nil
}

// SigningSecret returns the secret of the key that signs; other secrets
// that every replica holds may be derived from it (see inflight.IDs).
func (k *Keyring) SigningSecret() []byte {
	return k.signer.Secret
}

// Secrets returns the secrets of every key, the one that signs first and
// the others by ID, greatest first.
func (k *Keyring) Secrets() [][]byte {
	ids := slices.Sorted(maps.Keys(k.keys))
	slices.Reverse(ids)
	secrets := make([][]byte, len(ids))
	for i, id := range ids {
		secrets[i] = k.keys[id]
	}
	return secrets
}

// SigningKeyID returns the ID of the key that signs.
func (k *Keyring) SigningKeyID() string {
	return k.signer.ID
}

// LoadDir reads a keyring from a directory: every regular file (or link to
// one) is a key, named by its file name, whose content is the secret
// (a trailing newline is not part of it). Names starting with a dot are
// skipped, as are directories: a mounted Kubernetes Secret has both. The
// key with the greatest name signs.
func LoadDir(dir string) (*Keyring, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("failed to read the record keys in %s: %w", dir, err)
	}
	var keys []Key
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		info, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("failed to read record key %s: %w", path, err)
		}
		if !info.Mode().IsRegular() {
			continue
		}
		secret, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("failed to read record key %s: %w", path, err)
		}
		keys = append(keys, Key{ID: e.Name(), Secret: []byte(strings.TrimRight(string(secret), "\r\n"))})
	}
	k, err := NewKeyring(keys)
	if err != nil {
		return nil, fmt.Errorf("invalid record keys in %s: %w", dir, err)
	}
	return k, nil
}

// Keys is the current keyring of a directory, read again every interval
// while it runs (a manager.Runnable), so that keys are rotated without a
// restart (see docs/operations.md, "Trust boundary").
type Keys struct {
	dir      string
	interval time.Duration
	current  atomic.Pointer[Keyring]
}

// NewKeys reads the keyring in dir, failing if it is not valid.
func NewKeys(dir string, interval time.Duration) (*Keys, error) {
	k, err := LoadDir(dir)
	if err != nil {
		return nil, err
	}
	keys := &Keys{dir: dir, interval: interval}
	keys.current.Store(k)
	return keys, nil
}

// StaticKeys returns Keys that always hold keyring.
func StaticKeys(keyring *Keyring) *Keys {
	keys := &Keys{}
	keys.current.Store(keyring)
	return keys
}

// Keyring returns the current keyring.
func (k *Keys) Keyring() *Keyring {
	return k.current.Load()
}

// Start implements manager.Runnable: it reads the directory every interval
// until ctx is done. A directory that is invalid meanwhile (a Secret being
// rewritten) keeps the last valid keyring.
func (k *Keys) Start(ctx context.Context) error {
	if k.dir == "" || k.interval <= 0 {
		<-ctx.Done()
		return nil
	}
	logger := log.FromContext(ctx).WithName("record-keys")
	ticker := time.NewTicker(k.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		next, err := LoadDir(k.dir)
		if err != nil {
			logger.Error(err, "Keeping the record keys read before")
			continue
		}
		if prev := k.current.Swap(next); prev.SigningKeyID() != next.SigningKeyID() || len(prev.keys) != len(next.keys) {
			logger.Info("Record keys changed", "signingKey", next.SigningKeyID(), "keys", len(next.keys))
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica verifies records.
func (k *Keys) NeedLeaderElection() bool {
	return false
}
