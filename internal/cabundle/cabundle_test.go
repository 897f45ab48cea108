package cabundle

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testCA(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	ca := testCA(t, "a")
	tests := []struct {
		name, content, err string
	}{
		{name: "one certificate", content: string(ca)},
		{name: "two certificates", content: string(ca) + string(testCA(t, "b"))},
		{name: "empty", content: "", err: "contains no PEM certificate"},
		{name: "garbage", content: "not pem", err: "contains no PEM certificate"},
		{name: "private key", content: string(ca) + "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", err: `contains a "PRIVATE KEY" PEM block`},
		{name: "broken certificate", content: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", err: "contains an invalid certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Read(path)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("Read() error = %v, want %q", err, tt.err)
			}
		})
	}
	if _, err := Read(filepath.Join(dir, "missing")); err == nil {
		t.Errorf("Read() of a missing file succeeded")
	}
}

func TestWatcherPicksUpRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.crt")
	first, second := testCA(t, "first"), testCA(t, "second")
	if err := os.WriteFile(path, first, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := New(path, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Start(ctx) }()

	// An invalid file keeps the previous bundle and triggers nothing.
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Changes():
		t.Fatal("an invalid bundle triggered a change")
	case <-time.After(100 * time.Millisecond):
	}
	if !bytes.Equal(w.Bundle(), first) {
		t.Fatal("an invalid bundle replaced the valid one")
	}

	if err := os.WriteFile(path, second, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Changes():
	case <-time.After(5 * time.Second):
		t.Fatal("no change event after rotating the bundle")
	}
	if !bytes.Equal(w.Bundle(), second) {
		t.Error("Bundle() did not return the rotated bundle")
	}
}
