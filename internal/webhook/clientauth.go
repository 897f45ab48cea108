package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// ClientAuth returns a TLS option for the webhook server that accepts only
// callers presenting a client certificate signed by a CA in the PEM bundle
// that bundle returns (it is asked on every handshake, so a rotated bundle
// takes effect without a restart) and, if names is not empty, whose subject
// common name or one of whose DNS names is in names. kcp presents such a
// certificate when its admission configuration names a kubeconfig with a
// client certificate for the webhook's host (see docs/operations.md).
// Everything else is refused during the TLS handshake, before any request is
// read.
func ClientAuth(bundle func() []byte, names []string) func(*tls.Config) {
	var (
		lock     sync.Mutex
		lastPEM  []byte
		lastPool *x509.CertPool
	)
	pool := func() (*x509.CertPool, error) {
		lock.Lock()
		defer lock.Unlock()
		pem := bundle()
		if lastPool != nil && string(pem) == string(lastPEM) {
			return lastPool, nil
		}
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(pem) {
			return nil, errors.New("the client CA bundle holds no certificate")
		}
		lastPEM, lastPool = pem, p
		return p, nil
	}
	return func(c *tls.Config) {
		c.ClientAuth = tls.RequireAnyClientCert
		c.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("no client certificate")
			}
			certs := make([]*x509.Certificate, 0, len(raw))
			for _, r := range raw {
				cert, err := x509.ParseCertificate(r)
				if err != nil {
					return fmt.Errorf("invalid client certificate: %w", err)
				}
				certs = append(certs, cert)
			}
			roots, err := pool()
			if err != nil {
				return err
			}
			intermediates := x509.NewCertPool()
			for _, cert := range certs[1:] {
				intermediates.AddCert(cert)
			}
			leaf := certs[0]
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				return fmt.Errorf("client certificate not accepted: %w", err)
			}
			if len(names) > 0 && !slices.Contains(names, leaf.Subject.CommonName) && !slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return slices.Contains(names, n) }) {
				return fmt.Errorf("client certificate for %q is not one of the allowed clients %v", leaf.Subject.CommonName, names)
			}
			return nil
		}
	}
}
