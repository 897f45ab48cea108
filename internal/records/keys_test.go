package records

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNewKeyring(t *testing.T) {
	for _, tc := range []struct {
		name       string
		keys       []Key
		wantErr    string
		wantSigner string
	}{
		{"no keys", nil, "no key", ""},
		{"empty keys", []Key{}, "no key", ""},
		{"one key", []Key{{ID: "k", Secret: secret(1)}}, "", "k"},
		{"greatest ID signs", []Key{{ID: "2026-01", Secret: secret(1)}, {ID: "2026-03", Secret: secret(2)}, {ID: "2026-02", Secret: secret(3)}}, "", "2026-03"},
		{"greatest ID signs, byte order", []Key{{ID: "b", Secret: secret(1)}, {ID: "B", Secret: secret(2)}, {ID: "a", Secret: secret(3)}}, "", "b"},
		{"secret of exactly MinKeyLength", []Key{{ID: "k", Secret: bytes.Repeat([]byte{1}, MinKeyLength)}}, "", "k"},
		{"long secret", []Key{{ID: "k", Secret: bytes.Repeat([]byte{1}, 4*MinKeyLength)}}, "", "k"},
		{"short secret", []Key{{ID: "k", Secret: bytes.Repeat([]byte{1}, MinKeyLength-1)}}, "31 bytes", ""},
		{"empty secret", []Key{{ID: "k"}}, "at least 32", ""},
		{"one short secret among valid ones", []Key{{ID: "a", Secret: secret(1)}, {ID: "b", Secret: secret(2)[:8]}}, `key "b"`, ""},
		{"duplicate ID", []Key{{ID: "k", Secret: secret(1)}, {ID: "k", Secret: secret(2)}}, "appears twice", ""},
		{"duplicate ID, same secret", []Key{{ID: "k", Secret: secret(1)}, {ID: "k", Secret: secret(1)}}, "appears twice", ""},
		{"empty ID", []Key{{ID: "", Secret: secret(1)}}, "invalid key ID", ""},
		{"ID with space", []Key{{ID: "a b", Secret: secret(1)}}, "invalid key ID", ""},
		{"ID with tab", []Key{{ID: "a\tb", Secret: secret(1)}}, "invalid key ID", ""},
		{"ID with newline", []Key{{ID: "a\n", Secret: secret(1)}}, "invalid key ID", ""},
		{"ID with quote", []Key{{ID: `a"b`, Secret: secret(1)}}, "invalid key ID", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := NewKeyring(tc.keys)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("NewKeyring succeeded (signer %q), want an error containing %q", k.SigningKeyID(), tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("NewKeyring: %v, want an error containing %q", err, tc.wantErr)
				}
				if k != nil {
					t.Errorf("NewKeyring returned a keyring with the error %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewKeyring: %v", err)
			}
			if got := k.SigningKeyID(); got != tc.wantSigner {
				t.Errorf("SigningKeyID = %q, want %q", got, tc.wantSigner)
			}
			// Secrets: the signing key's first, then every other one.
			if s := k.Secrets(); len(s) != len(tc.keys) || !bytes.Equal(s[0], k.SigningSecret()) {
				t.Errorf("Secrets = %d, want %d with the signing key's first", len(s), len(tc.keys))
			}
			// Every key verifies what a keyring of just that key signs.
			for _, key := range tc.keys {
				single, err := NewKeyring([]Key{key})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := k.Verify(subject, encode(t, single, subject, request), requestedAt, 0); err != nil {
					t.Errorf("key %q does not verify: %v", key.ID, err)
				}
			}
		})
	}
}

func TestNewKeyringCopiesSecrets(t *testing.T) {
	s := secret('s')
	k, err := NewKeyring([]Key{{ID: "k", Secret: s}})
	if err != nil {
		t.Fatal(err)
	}
	annotation := encode(t, k, subject, request)
	for i := range s {
		s[i] = 0
	}
	if _, err := k.Verify(subject, annotation, requestedAt, 0); err != nil {
		t.Errorf("changing the caller's secret changed the keyring: %v", err)
	}
	if got := encode(t, k, subject, request); got != annotation {
		t.Errorf("changing the caller's secret changed the signatures: %s, then %s", annotation, got)
	}
}

// writeFile writes content to dir/name, creating parent directories.
func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// assertKeys checks that k signs with signer and holds exactly the keys
// with the given secrets: each verifies a record signed with it, and keys
// not listed do not.
func assertKeys(t *testing.T, k *Keyring, signer string, keys map[string]string) {
	t.Helper()
	if got := k.SigningKeyID(); got != signer {
		t.Errorf("SigningKeyID = %q, want %q", got, signer)
	}
	if len(k.keys) != len(keys) {
		t.Errorf("keyring holds %d keys, want %d", len(k.keys), len(keys))
	}
	for id, s := range keys {
		single, err := NewKeyring([]Key{{ID: id, Secret: []byte(s)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Verify(subject, encode(t, single, subject, request), requestedAt, 0); err != nil {
			t.Errorf("key %q with secret %q does not verify: %v", id, s, err)
		}
	}
}

var (
	secret1 = strings.Repeat("1", MinKeyLength)
	secret2 = strings.Repeat("2", MinKeyLength)
	secret3 = strings.Repeat("3", MinKeyLength)
)

func TestLoadDir(t *testing.T) {
	for _, tc := range []struct {
		name       string
		setup      func(t *testing.T, dir string)
		wantErr    string
		wantSigner string
		wantKeys   map[string]string
	}{
		{
			name:       "one key",
			setup:      func(t *testing.T, dir string) { writeFile(t, dir, "key-1", secret1) },
			wantSigner: "key-1",
			wantKeys:   map[string]string{"key-1": secret1},
		},
		{
			name: "two keys, greatest name signs",
			setup: func(t *testing.T, dir string) {
				writeFile(t, dir, "key-2", secret2)
				writeFile(t, dir, "key-1", secret1)
			},
			wantSigner: "key-2",
			wantKeys:   map[string]string{"key-1": secret1, "key-2": secret2},
		},
		{
			name:       "trailing newline trimmed",
			setup:      func(t *testing.T, dir string) { writeFile(t, dir, "key-1", secret1+"\n") },
			wantSigner: "key-1",
			wantKeys:   map[string]string{"key-1": secret1},
		},
		{
			name:       "trailing CRLF trimmed",
			setup:      func(t *testing.T, dir string) { writeFile(t, dir, "key-1", secret1+"\r\n") },
			wantSigner: "key-1",
			wantKeys:   map[string]string{"key-1": secret1},
		},
		{
			name:       "inner newline kept",
			setup:      func(t *testing.T, dir string) { writeFile(t, dir, "key-1", secret1[:16]+"\n"+secret1[16:]+"\n") },
			wantSigner: "key-1",
			wantKeys:   map[string]string{"key-1": secret1[:16] + "\n" + secret1[16:]},
		},
		{
			name: "leading and trailing spaces are part of the secret",
			setup: func(t *testing.T, dir string) {
				writeFile(t, dir, "key-1", " "+secret1+" \n")
			},
			wantSigner: "key-1",
			wantKeys:   map[string]string{"key-1": " " + secret1 + " "},
		},
		{
			name: "dot-files skipped",
			setup: func(t *testing.T, dir string) {
				writeFile(t, dir, "key-1", secret1)
				writeFile(t, dir, ".hidden", "short")        // would be invalid
				writeFile(t, dir, ".zzz", secret3)           // would sign
				writeFile(t, dir, "..2026_11_26/key-9", "x") // would be invalid
			},
			wantSigner: "key-1",
			wantKeys:   map[string]string{"key-1": secret1},
		},
		{
			name: "subdirectories skipped",
			setup: func(t *testing.T, dir string) {
				writeFile(t, dir, "key-1", secret1)
				writeFile(t, dir, "zzz/key-9", "short")
				if err := os.Mkdir(filepath.Join(dir, "zempty"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantSigner: "key-1",
			wantKeys:   map[string]string{"key-1": secret1},
		},
		{
			name: "symlinks to files followed, to directories skipped",
			setup: func(t *testing.T, dir string) {
				outside := t.TempDir()
				writeFile(t, outside, "secret", secret2+"\n")
				writeFile(t, outside, "sub/x", "short")
				writeFile(t, dir, "key-1", secret1)
				symlink(t, filepath.Join(outside, "secret"), filepath.Join(dir, "key-2"))
				symlink(t, filepath.Join(outside, "sub"), filepath.Join(dir, "key-3"))
			},
			wantSigner: "key-2",
			wantKeys:   map[string]string{"key-1": secret1, "key-2": secret2},
		},
		{
			// The layout of a mounted Kubernetes Secret.
			name: "mounted Kubernetes Secret",
			setup: func(t *testing.T, dir string) {
				writeFile(t, dir, "..2026_11_26/key-1", secret1+"\n")
				writeFile(t, dir, "..2026_11_26/key-2", secret2)
				symlink(t, "..2026_11_26", filepath.Join(dir, "..data"))
				symlink(t, "..data/key-1", filepath.Join(dir, "key-1"))
				symlink(t, "..data/key-2", filepath.Join(dir, "key-2"))
			},
			wantSigner: "key-2",
			wantKeys:   map[string]string{"key-1": secret1, "key-2": secret2},
		},
		{
			name:    "empty directory",
			setup:   func(t *testing.T, dir string) {},
			wantErr: "no key",
		},
		{
			name: "only dot-files and directories",
			setup: func(t *testing.T, dir string) {
				writeFile(t, dir, ".key", secret1)
				writeFile(t, dir, "sub/key", secret1)
			},
			wantErr: "no key",
		},
		{
			name:    "missing directory",
			setup:   func(t *testing.T, dir string) { _ = os.Remove(dir) },
			wantErr: "failed to read the record keys",
		},
		{
			name: "a file, not a directory",
			setup: func(t *testing.T, dir string) {
				_ = os.Remove(dir)
				writeFile(t, filepath.Dir(dir), filepath.Base(dir), secret1)
			},
			wantErr: "failed to read the record keys",
		},
		{
			name: "short key",
			setup: func(t *testing.T, dir string) {
				writeFile(t, dir, "key-1", secret1)
				writeFile(t, dir, "key-2", strings.Repeat("x", MinKeyLength-1)+"\n")
			},
			wantErr: `key "key-2" has 31 bytes`,
		},
		{
			name:    "key that is only newlines short once trimmed",
			setup:   func(t *testing.T, dir string) { writeFile(t, dir, "key-1", strings.Repeat("\n", 2*MinKeyLength)) },
			wantErr: "has 0 bytes",
		},
		{
			name:    "invalid file name as key ID",
			setup:   func(t *testing.T, dir string) { writeFile(t, dir, "key 1", secret1) },
			wantErr: "invalid key ID",
		},
		{
			name: "dangling symlink",
			setup: func(t *testing.T, dir string) {
				writeFile(t, dir, "key-1", secret1)
				symlink(t, "..data/key-2", filepath.Join(dir, "key-2"))
			},
			wantErr: "failed to read record key",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "keys")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, dir)
			k, err := LoadDir(dir)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("LoadDir succeeded (signer %q), want an error containing %q", k.SigningKeyID(), tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("LoadDir: %v, want an error containing %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), dir) {
					t.Errorf("LoadDir: %v does not name the directory %s", err, dir)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadDir: %v", err)
			}
			assertKeys(t, k, tc.wantSigner, tc.wantKeys)
		})
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startKeys runs k.Start until the test ends, and checks that it returns
// nil once stopped.
func startKeys(t *testing.T, k *Keys) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start returned %v, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Start did not return after its context was done")
		}
	})
}

func TestKeysStartRotates(t *testing.T) {
	const interval = 10 * time.Millisecond
	dir := t.TempDir()
	writeFile(t, dir, "key-1", secret1+"\n")

	keys, err := NewKeys(dir, interval)
	if err != nil {
		t.Fatalf("NewKeys: %v", err)
	}
	first := keys.Keyring()
	assertKeys(t, first, "key-1", map[string]string{"key-1": secret1})
	oldRecord := encode(t, first, subject, request)
	startKeys(t, keys)

	// A new key is picked up, and signs; the old one still verifies.
	writeFile(t, dir, "key-2", secret2+"\n")
	waitFor(t, 5*time.Second, "key-2 to sign", func() bool { return keys.Keyring().SigningKeyID() == "key-2" })
	second := keys.Keyring()
	assertKeys(t, second, "key-2", map[string]string{"key-1": secret1, "key-2": secret2})
	if _, err := second.Verify(subject, oldRecord, requestedAt, 0); err != nil {
		t.Errorf("a record of key-1 does not verify after the rotation: %v", err)
	}

	// The directory becomes invalid: the last valid keyring is kept.
	writeFile(t, dir, "key-3", "too short")
	time.Sleep(20 * interval)
	if got := keys.Keyring(); got != second {
		t.Fatalf("the keyring changed to one signing with %q while the directory was invalid", got.SigningKeyID())
	}
	if err := os.Remove(filepath.Join(dir, "key-3")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"key-1", "key-2"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * interval) // now empty: no key
	if got := keys.Keyring(); got != second {
		t.Fatalf("the keyring changed to one signing with %q while the directory was empty", got.SigningKeyID())
	}

	// Once valid again, it is read again: key-1 retired.
	writeFile(t, dir, "key-3", secret3)
	waitFor(t, 5*time.Second, "key-3 to sign", func() bool { return keys.Keyring().SigningKeyID() == "key-3" })
	third := keys.Keyring()
	assertKeys(t, third, "key-3", map[string]string{"key-3": secret3})
	if _, err := third.Verify(subject, oldRecord, requestedAt, 0); ProblemOf(err) != ProblemUnknownKey {
		t.Errorf("a record of the retired key-1: %v, want %s", err, ProblemUnknownKey)
	}
}

func TestKeysStartMountedSecretUpdate(t *testing.T) {
	// A mounted Secret is updated by writing a new timestamped directory
	// and swapping the ..data link.
	const interval = 10 * time.Millisecond
	dir := t.TempDir()
	writeFile(t, dir, "..2026_11_26/key-1", secret1)
	symlink(t, "..2026_11_26", filepath.Join(dir, "..data"))
	symlink(t, "..data/key-1", filepath.Join(dir, "key-1"))

	keys, err := NewKeys(dir, interval)
	if err != nil {
		t.Fatalf("NewKeys: %v", err)
	}
	startKeys(t, keys)

	writeFile(t, dir, "..2026_11_27/key-1", secret1)
	writeFile(t, dir, "..2026_11_27/key-2", secret2)
	symlink(t, "..2026_11_27", filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	symlink(t, "..data/key-2", filepath.Join(dir, "key-2"))
	if err := os.RemoveAll(filepath.Join(dir, "..2026_11_26")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "key-2 to sign", func() bool { return keys.Keyring().SigningKeyID() == "key-2" })
	assertKeys(t, keys.Keyring(), "key-2", map[string]string{"key-1": secret1, "key-2": secret2})
}

func TestKeysWithoutRereading(t *testing.T) {
	k := mustKeyring(t, "key-1")
	dir := t.TempDir()
	writeFile(t, dir, "key-1", secret1)
	fromDir, err := NewKeys(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		keys *Keys
		want *Keyring
	}{
		{"static", StaticKeys(k), k},
		{"interval 0", fromDir, fromDir.Keyring()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.keys.Keyring(); got != tc.want {
				t.Fatalf("Keyring() = %p, want %p", got, tc.want)
			}
			if tc.keys.NeedLeaderElection() {
				t.Error("NeedLeaderElection() = true, want false: every replica verifies")
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- tc.keys.Start(ctx) }()
			// Start must block until ctx is done.
			select {
			case err := <-done:
				t.Fatalf("Start returned %v before its context was done", err)
			case <-time.After(50 * time.Millisecond):
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Start returned %v, want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Start did not return after its context was done")
			}
			if got := tc.keys.Keyring(); got != tc.want {
				t.Errorf("Keyring() changed to %p", got)
			}
		})
	}
}

func TestNewKeysErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"missing directory", func(t *testing.T, dir string) { _ = os.Remove(dir) }},
		{"empty directory", func(t *testing.T, dir string) {}},
		{"short key", func(t *testing.T, dir string) { writeFile(t, dir, "k", "short") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			if k, err := NewKeys(dir, time.Second); err == nil {
				t.Fatalf("NewKeys succeeded (signer %q), want an error", k.Keyring().SigningKeyID())
			}
		})
	}
}
