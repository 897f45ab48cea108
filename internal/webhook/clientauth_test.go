package webhook

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// testCA is a CA that issues client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) client(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestClientAuth(t *testing.T) {
	trusted, other := newTestCA(t, "kcp admission client CA"), newTestCA(t, "someone else")
	var bundle atomic.Pointer[[]byte]
	bundle.Store(&trusted.pem)
	called := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called++ }))
	srv.TLS = &tls.Config{}
	ClientAuth(func() []byte { return *bundle.Load() }, []string{"kcp"})(srv.TLS)
	srv.StartTLS()
	defer srv.Close()

	get := func(certs ...tls.Certificate) error {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.Certificates = certs
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	tests := []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{name: "no client certificate", ok: false},
		{name: "a certificate from another CA", certs: []tls.Certificate{other.client(t, "kcp")}, ok: false},
		{name: "a certificate for another client", certs: []tls.Certificate{trusted.client(t, "mallory")}, ok: false},
		{name: "kcp's certificate", certs: []tls.Certificate{trusted.client(t, "kcp")}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called = 0
			err := get(tt.certs...)
			if tt.ok != (err == nil) || tt.ok != (called == 1) {
				t.Errorf("error = %v, handler called %d times; want accepted = %v", err, called, tt.ok)
			}
		})
	}

	// The bundle is rotated: certificates of the new CA are accepted, of the
	// old one no longer.
	bundle.Store(&other.pem)
	if err := get(other.client(t, "kcp")); err != nil {
		t.Errorf("after rotation, a certificate of the new CA: %v", err)
	}
	if err := get(trusted.client(t, "kcp")); err == nil {
		t.Error("after rotation, a certificate of the old CA was accepted")
	}
}
