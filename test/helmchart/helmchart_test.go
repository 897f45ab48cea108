package helmchart

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opendefensecloud/dependency-controller/internal/records"
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
	// The record keys: every key of the Secret the chart creates, as a
	// directory.
	keysDir, _ := w.Flag("record-keys-dir")
	if m, rel, ok := w.MountOf(keysDir); !ok || rel != "." || m.Kind != "Secret" || m.Name != RecordKeysSecret("dc-dependency-controller") || m.Files != nil || !m.ReadOnly {
		t.Errorf("--record-keys-dir=%s is not the mounted Secret %s: %+v", keysDir, RecordKeysSecret("dc-dependency-controller"), m)
	}
	if keys := bins.Secrets[RecordKeysSecret("dc-dependency-controller")]; len(keys) != 1 || len(keys["key-1"]) < 32 {
		t.Errorf("the rendered record keys: %d keys, key-1 of %d bytes; want one of at least 32", len(keys), len(keys["key-1"]))
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
		"--record-keys-dir=" + filepath.Join("/work", RecordKeysSecret("dc-dependency-controller")),
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
		// One replica records, the elected one replays: all share the
		// keys.
		dir, _ := inv.Flag("record-keys-dir")
		if m, rel, ok := inv.MountOf(dir); !ok || rel != "." || m.Name != RecordKeysSecret("dc-dependency-controller") {
			t.Errorf("webhook of shard %s: --record-keys-dir=%s is not the shared Secret: %+v", shard, dir, m)
		}
	}
	if len(bins.Secrets) != 1 {
		t.Errorf("want one Secret of record keys for all shards, got %d", len(bins.Secrets))
	}

	_, err = RenderBinaries(context.Background(), Options{Values: map[string]any{"webhook": map[string]any{"shards": []any{
		map[string]any{"name": "root"},
	}}}})
	if err == nil || !strings.Contains(err.Error(), "url") {
		t.Errorf("a shard without a url rendered: %v", err)
	}
}

// The webhook loads the key the chart generates from a directory laid out
// as the kubelet projects the Secret (..data and a timestamped directory,
// which it must skip), and a key added or removed in the Secret reaches it.
func TestRecordKeysLoadLikeInAPod(t *testing.T) {
	bins, err := RenderBinaries(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	name := RecordKeysSecret(DefaultReleaseName)
	keys, ok := bins.Secrets[name]
	if !ok {
		t.Fatalf("no Secret %s among %v", name, bins.Secrets)
	}
	local := t.TempDir()
	args, err := bins.Webhook.LocalArgs(func(m Mount) (string, error) {
		dir := filepath.Join(local, m.Name)
		if m.Name != name {
			return dir, nil
		}
		return dir, WriteSecretVolume(dir, keys)
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := (Invocation{Args: args}).flagOrFail(t, "record-keys-dir")
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("the projected Secret has %d entries, want ..data, its target and key-1", len(entries))
	}
	ring, err := records.LoadDir(dir)
	if err != nil {
		t.Fatalf("the webhook does not load the chart's key: %v", err)
	}
	if id := ring.SigningKeyID(); id != "key-1" {
		t.Errorf("signing key %q, want key-1", id)
	}

	// Rotation: key-2 is added and signs; then key-1 is removed.
	keys["key-2"] = []byte(strings.Repeat("k", records.MinKeyLength))
	if err := WriteSecretVolume(dir, keys); err != nil {
		t.Fatal(err)
	}
	if ring, err := records.LoadDir(dir); err != nil {
		t.Errorf("after adding key-2: %v", err)
	} else if id := ring.SigningKeyID(); id != "key-2" {
		t.Errorf("after adding key-2, %s signs; want key-2", id)
	}
	delete(keys, "key-1")
	if err := WriteSecretVolume(dir, keys); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "key-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("key-1 is still projected: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("after two updates the projected Secret has %d entries, want 3", len(entries))
	}
	if ring, err := records.LoadDir(dir); err != nil {
		t.Errorf("after removing key-1: %v", err)
	} else if id := ring.SigningKeyID(); id != "key-2" {
		t.Errorf("after removing key-1, %s signs; want key-2", id)
	}
	if err := WriteSecretVolume(dir, map[string][]byte{"../x": nil}); err == nil {
		t.Error("WriteSecretVolume wrote a key outside the directory")
	}
}

// flagOrFail returns the value of a flag that the test expects.
func (inv Invocation) flagOrFail(t *testing.T, name string) string {
	t.Helper()
	v, ok := inv.Flag(name)
	if !ok {
		t.Fatalf("no --%s in %q", name, inv.Args)
	}
	return v
}

// The Secrets among rendered objects, with data decoded and stringData
// over it; other kinds of objects are no Secrets.
func TestSecretsFromObjects(t *testing.T) {
	var objs []*unstructured.Unstructured
	for _, doc := range []string{
		`{apiVersion: apps/v1, kind: Deployment, metadata: {name: c, labels: {app.kubernetes.io/component: controller}}, spec: {template: {spec: {containers: [{name: controller, args: [--a=1]}]}}}}`,
		`{apiVersion: apps/v1, kind: Deployment, metadata: {name: w, labels: {app.kubernetes.io/component: webhook}}, spec: {template: {spec: {containers: [{name: webhook, args: [--b=2]}]}}}}`,
		`{apiVersion: v1, kind: Secret, metadata: {name: s}, data: {a: YWFh, b: YmJi}, stringData: {b: override, c: ccc}}`,
		`{apiVersion: v1, kind: ConfigMap, metadata: {name: s}, data: {a: x}}`,
	} {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	bins, err := BinariesFrom(objs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string][]byte{"s": {"a": []byte("aaa"), "b": []byte("override"), "c": []byte("ccc")}}
	if !reflect.DeepEqual(bins.Secrets, want) {
		t.Errorf("Secrets = %q, want %q", bins.Secrets, want)
	}
	if !reflect.DeepEqual(bins.Webhook.Args, []string{"--b=2"}) || !reflect.DeepEqual(bins.Controller.Args, []string{"--a=1"}) {
		t.Errorf("the Deployments: %+v", bins)
	}
}
