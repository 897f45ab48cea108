package helmchart

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// A pod like the chart's, written by hand, so that the extraction is tested
// without Helm.
const deployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: x-webhook
  labels:
    app.kubernetes.io/component: webhook
spec:
  selector: {matchLabels: {a: b}}
  template:
    spec:
      containers:
      - name: sidecar
        args: [--ignored]
      - name: webhook
        args:
        - --kubeconfig=/etc/w/kubeconfig/kubeconfig
        - --cert-dir=/etc/w/serving-cert
        - --tls-cert-file=tls.crt
        - /etc/w/client-ca/ca.crt
        - --port=9443
        - --path=/validate
        volumeMounts:
        - {name: kubeconfig, mountPath: /etc/w/kubeconfig, readOnly: true}
        - {name: serving-cert, mountPath: /etc/w/serving-cert, readOnly: true}
        - {name: client-ca, mountPath: /etc/w/client-ca}
        - {name: scratch, mountPath: /tmp}
      volumes:
      - name: kubeconfig
        secret:
          secretName: wh-kubeconfig
          items: [{key: config, path: kubeconfig}]
      - name: serving-cert
        secret: {secretName: wh-tls}
      - name: client-ca
        configMap:
          name: kcp-ca
          items: [{key: ca.pem, path: ca.crt}]
      - name: scratch
        emptyDir: {}
`

func TestInvocationFromDeployment(t *testing.T) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(deployment), &m); err != nil {
		t.Fatal(err)
	}
	objs := []*unstructured.Unstructured{{Object: m}}
	inv, err := invocationOf(objs, Webhook)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := invocationOf(objs, Controller); err == nil {
		t.Error("found a controller Deployment among webhook objects")
	}

	if v, ok := inv.Flag("cert-dir"); !ok || v != "/etc/w/serving-cert" {
		t.Errorf("Flag(cert-dir) = %q, %v", v, ok)
	}
	if _, ok := inv.Flag("client-ca-file"); ok {
		t.Error("Flag found an argument that is not there")
	}
	if len(inv.Mounts) != 3 {
		t.Fatalf("want the 3 Secret and ConfigMap mounts, got %+v", inv.Mounts)
	}
	wantFiles := map[string]FileSource{
		"/etc/w/kubeconfig/kubeconfig": {Kind: "Secret", Name: "wh-kubeconfig", Key: "config"},
		"/etc/w/client-ca/ca.crt":      {Kind: "ConfigMap", Name: "kcp-ca", Key: "ca.pem"},
	}
	if got := inv.Files(); !reflect.DeepEqual(got, wantFiles) {
		t.Errorf("Files() = %v, want %v", got, wantFiles)
	}
	if m, rel, ok := inv.MountOf("/etc/w/serving-cert/tls.crt"); !ok || m.Name != "wh-tls" || rel != "tls.crt" || m.Files != nil || !m.ReadOnly {
		t.Errorf("MountOf(serving cert) = %+v, %q, %v", m, rel, ok)
	}
	if _, _, ok := inv.MountOf("/etc/w/serving-certificate"); ok {
		t.Error("a sibling path with the same prefix counts as inside the mount")
	}

	local := map[string]string{"wh-kubeconfig": "/local/kc", "wh-tls": "/local/tls", "kcp-ca": "/local/ca"}
	args, err := inv.LocalArgs(func(m Mount) (string, error) { return local[m.Name], nil })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--kubeconfig=" + filepath.FromSlash("/local/kc/kubeconfig"),
		"--cert-dir=" + filepath.FromSlash("/local/tls"),
		"--tls-cert-file=tls.crt",
		filepath.FromSlash("/local/ca/ca.crt"),
		"--port=9443",
		"--path=/validate",
	}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("LocalArgs() =\n%q\nwant\n%q", args, want)
	}
	if !reflect.DeepEqual(inv.Args[0], "--kubeconfig=/etc/w/kubeconfig/kubeconfig") {
		t.Error("LocalArgs changed Args")
	}
	boom := errors.New("boom")
	if _, err := inv.LocalArgs(func(Mount) (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Errorf("LocalArgs error = %v, want it to wrap the callback's", err)
	}
}

// The chart's own arguments: every file a binary reads comes from a mounted
// Secret, and LocalArgs points them all at local files.
func TestRenderBinaries(t *testing.T) {
	bins, err := RenderBinaries(context.Background(), Options{
		ReleaseName: "dc",
		Namespace:   "ops",
		Values: map[string]any{
			"webhook": map[string]any{"port": 10443},
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	c, w := bins.Controller, bins.Webhook
	for _, tc := range []struct {
		inv  Invocation
		flag string
		want FileSource
	}{
		{c, "kubeconfig", FileSource{"Secret", "dependency-controller-kubeconfig", "kubeconfig"}},
		{c, "webhook-ca-bundle", FileSource{"Secret", "dc-dependency-controller-webhook-tls", "ca.crt"}},
		{w, "kubeconfig", FileSource{"Secret", "dependency-webhook-kubeconfig", "kubeconfig"}},
	} {
		file, ok := tc.inv.Flag(tc.flag)
		if got := tc.inv.Files()[file]; !ok || got != tc.want {
			t.Errorf("--%s=%s comes from %+v, want %+v", tc.flag, file, got, tc.want)
		}
	}
	certDir, _ := w.Flag("cert-dir")
	m, rel, ok := w.MountOf(certDir)
	if !ok || rel != "." || m.Name != "dc-dependency-controller-webhook-tls" || m.Files["tls.crt"] != "tls.crt" || m.Files["tls.key"] != "tls.key" {
		t.Errorf("--cert-dir=%s is not the mounted serving certificate: %+v", certDir, m)
	}
	if v, _ := w.Flag("port"); v != "10443" {
		t.Errorf("--port=%s, want the value 10443", v)
	}

	args, err := w.LocalArgs(func(m Mount) (string, error) { return filepath.Join("/work", m.Name), nil })
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(args, " ")
	if strings.Contains(joined, "/etc/") {
		t.Errorf("a container path is left in %q", args)
	}
	for _, want := range []string{
		"--kubeconfig=" + filepath.Join("/work", "dependency-webhook-kubeconfig", "kubeconfig"),
		"--cert-dir=" + filepath.Join("/work", "dc-dependency-controller-webhook-tls"),
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("%q lacks %s", args, want)
		}
	}
}

func TestKubeVersion(t *testing.T) {
	v, err := KubeVersion()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, "v1.") {
		t.Errorf("KubeVersion() = %q", v)
	}
}

// With webhook.shards the chart renders a webhook Deployment per shard,
// each with its shard's flags.
func TestRenderBinariesOfShards(t *testing.T) {
	bins, err := RenderBinaries(context.Background(), Options{
		ReleaseName: "dc",
		Namespace:   "ops",
		Values: map[string]any{"webhook": map[string]any{"shards": []any{
			map[string]any{"name": "root", "url": "https://root.kcp:6443"},
			map[string]any{"name": "shard-1", "url": "https://shard-1.kcp:6443"},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bins.ShardWebhooks) != 2 || len(bins.Webhook.Args) != 0 {
		t.Fatalf("webhooks: one for all shards %v, per shard %v", bins.Webhook.Args, bins.ShardWebhooks)
	}
	for shard, url := range map[string]string{"root": "https://root.kcp:6443", "shard-1": "https://shard-1.kcp:6443"} {
		inv := bins.ShardWebhooks[shard]
		name, _ := inv.Flag("shard-name")
		u, _ := inv.Flag("shard-url")
		if name != shard || u != url {
			t.Errorf("webhook of shard %s: --shard-name=%s --shard-url=%s", shard, name, u)
		}
		if _, ok := inv.Flag("kubeconfig"); !ok {
			t.Errorf("webhook of shard %s has no --kubeconfig: %q", shard, inv.Args)
		}
	}

	_, err = RenderBinaries(context.Background(), Options{Values: map[string]any{"webhook": map[string]any{"shards": []any{
		map[string]any{"name": "root"},
	}}}})
	if err == nil || !strings.Contains(err.Error(), "url") {
		t.Errorf("a shard without a url rendered: %v", err)
	}
}
