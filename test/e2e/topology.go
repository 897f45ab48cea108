//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// FrontProxyURL is where kcp's sharded-test-server serves its front-proxy; the
// shards listen on 6444, 6445, ...
const FrontProxyURL = "https://127.0.0.1:6443"

// Shard is one kcp shard of the topology.
type Shard struct {
	// Name is the shard's name: root, shard-1, ...
	Name string
	// Kubeconfig talks to the shard directly; its context "system:admin" is a
	// system:masters identity.
	Kubeconfig string
}

// Topology is a kcp started by kcp's sharded-test-server: a cache server, one
// or more shards and a front-proxy, from the kcp binaries of
// kcpenv.BinDir.
type Topology struct {
	// Dir holds the state of all processes.
	Dir string
	// AdminKubeconfig is an admin identity through the front-proxy.
	AdminKubeconfig string
	// Shards are the shards, root first.
	Shards []Shard
	// Version is the version of the kcp binary.
	Version kcpversion.Info

	proc *kcpenv.Process
}

// StartTopology starts kcp with the given number of shards from the kcp
// binaries in kcpBinDir, says on out which kcp it is, and waits until it is
// ready. Its output goes to dir/sharded-test-server.log.
func StartTopology(ctx context.Context, out io.Writer, kcpBinDir, dir string, shards int) (*Topology, error) {
	version, err := kcpenv.CheckBinaries(out, kcpBinDir, "kcp", "kcp-front-proxy", "cache-server", "sharded-test-server")
	if err != nil {
		return nil, err
	}
	// kcp's test server passes <repository>/test/e2e/framework/auth-tokens.csv
	// to the shards, where <repository> is the first directory upwards of the
	// working directory that has a .git entry. Give it a self-contained one.
	if err := os.MkdirAll(filepath.Join(dir, ".git"), 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "test", "e2e", "framework"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "test", "e2e", "framework", "auth-tokens.csv"), []byte("unused-token,unused,0,\"none\"\n"), 0o600); err != nil {
		return nil, err
	}
	proc := &kcpenv.Process{
		Name:   "sharded-test-server",
		Binary: filepath.Join(kcpBinDir, "sharded-test-server"),
		Args: []string{
			"--number-of-shards=" + strconv.Itoa(shards),
			"--work-dir-path=" + dir,
			"--log-dir-path=" + filepath.Join(dir, "logs"),
			"--quiet",
		},
		LogPath: filepath.Join(dir, "sharded-test-server.log"),
		Dir:     dir,
		Env:     []string{"PATH=" + kcpBinDir + ":" + os.Getenv("PATH"), "NO_GORUN=1"},
	}
	t := &Topology{Dir: dir, AdminKubeconfig: filepath.Join(dir, ".kcp", "admin.kubeconfig"), Version: version, proc: proc}
	for i := range shards {
		name := "root"
		if i > 0 {
			name = fmt.Sprintf("shard-%d", i)
		}
		t.Shards = append(t.Shards, Shard{Name: name, Kubeconfig: filepath.Join(dir, fmt.Sprintf(".kcp-%d", i), "admin.kubeconfig")})
	}
	// kcp's test server sometimes exits during its own bootstrap (seen: a
	// patch of the root Shard refused as workspace access of User "" right
	// after the shard reported ready); start once more on fresh state then.
	err = t.start(ctx)
	if errors.Is(err, errExitedBeforeReady) {
		for _, state := range []string{".kcp", ".kcp-cache", ".kcp-front-proxy", "logs"} {
			_ = os.RemoveAll(filepath.Join(dir, state))
		}
		for i := range shards {
			_ = os.RemoveAll(filepath.Join(dir, fmt.Sprintf(".kcp-%d", i)))
		}
		err = t.start(ctx)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// errExitedBeforeReady is returned by start when sharded-test-server exits
// before kcp is ready.
var errExitedBeforeReady = errors.New("sharded-test-server exited before kcp was ready")

// start starts every process of the topology and waits until kcp is ready.
func (t *Topology) start(ctx context.Context) error {
	ready := filepath.Join(t.Dir, ".kcp", "ready-to-test")
	if err := os.Remove(ready); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := t.proc.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if _, err := os.Stat(ready); err == nil {
			return nil
		}
		select {
		case <-t.proc.Done():
			return fmt.Errorf("%w; see %s", errExitedBeforeReady, t.proc.LogPath)
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			t.Stop()
			return fmt.Errorf("kcp not ready after 5 minutes; see %s", t.proc.LogPath)
		}
	}
}

// Restart stops every process of the topology (cache server, all shards,
// front-proxy) and starts them again on the same state: the same CAs,
// identities, etcd data and ports.
func (t *Topology) Restart(ctx context.Context) error {
	t.Stop()
	return t.start(ctx)
}

// Stop stops every process of the topology.
func (t *Topology) Stop() {
	t.proc.Stop()
}

// AdminConfig returns an admin REST config for the front-proxy, without a
// workspace.
func (t *Topology) AdminConfig() (*rest.Config, error) {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: t.AdminKubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: "base"},
	).ClientConfig()
}

// WriteUserKubeconfig writes a kubeconfig for user (without groups beyond
// system:authenticated) pointing at workspace through the front-proxy. The
// user authenticates with a client certificate signed by the topology's
// client CA, which the front-proxy and the shards trust.
func (t *Topology) WriteUserKubeconfig(user, workspace, path string) error {
	caCert, caKey, err := loadCA(filepath.Join(t.Dir, ".kcp", "client-ca.crt"), filepath.Join(t.Dir, ".kcp", "client-ca.key"))
	if err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: user},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}

	admin, err := clientcmd.LoadFromFile(t.AdminKubeconfig)
	if err != nil {
		return err
	}
	serverCA := admin.Clusters["base"].CertificateAuthorityData
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kcp"] = &clientcmdapi.Cluster{Server: FrontProxyURL + "/clusters/" + workspace, CertificateAuthorityData: serverCA}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		ClientKeyData:         pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
	}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "kcp", AuthInfo: user}
	cfg.CurrentContext = user
	return clientcmd.WriteToFile(*cfg, path)
}

func loadCA(certPath, keyPath string) (*x509.Certificate, any, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("client CA is not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	if key, err := x509.ParsePKCS1PrivateKey(kb.Bytes); err == nil {
		return cert, key, nil
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	return cert, key, err
}
