package chart_test

import (
	"regexp"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/opendefensecloud/dependency-controller/test/helmchart"
)

// minKeyLength is the least number of bytes of a record key the webhook
// accepts (records.MinKeyLength).
const minKeyLength = 32

// webhookInvocations returns how every webhook Deployment runs the webhook:
// the one for every shard, or one per shard.
func webhookInvocations(r *rendered) map[string]helmchart.Invocation {
	if len(r.bins.ShardWebhooks) > 0 {
		return r.bins.ShardWebhooks
	}
	return map[string]helmchart.Invocation{"": r.bins.Webhook}
}

// checkRecordKeys checks that every webhook Deployment passes
// --record-keys-dir, a read-only directory mount of every key of the Secret
// secret: they share the keys, as one replica records a deferred deletion
// and the elected one replays it.
func checkRecordKeys(t *testing.T, r *rendered, secret string) {
	t.Helper()
	if len(r.webhooks) == 0 || len(r.webhooks) != len(webhookInvocations(r)) {
		t.Fatalf("%d webhook Deployments, %d invocations", len(r.webhooks), len(webhookInvocations(r)))
	}
	for shard, w := range webhookInvocations(r) {
		dir, ok := w.Flag("record-keys-dir")
		if !ok {
			t.Errorf("the webhook (shard %q) has no --record-keys-dir: %q", shard, w.Args)
			continue
		}
		m, rel, ok := w.MountOf(dir)
		if !ok || rel != "." || m.SubPath != "" || m.Kind != "Secret" || m.Name != secret || m.Files != nil || !m.ReadOnly {
			t.Errorf("the webhook (shard %q): --record-keys-dir=%s is not a read-only mount of every key of Secret %s: %+v", shard, dir, secret, m)
		}
	}
	for _, d := range r.webhooks {
		if !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == secret && len(v.Secret.Items) == 0
		}) {
			t.Errorf("%s has no volume of all keys of Secret %s", d.Name, secret)
		}
	}
}

// checkNoRecordKeys checks that no webhook Deployment passes
// --record-keys-dir or mounts record keys, and that no Secret is rendered.
func checkNoRecordKeys(t *testing.T, r *rendered) {
	t.Helper()
	for shard, w := range webhookInvocations(r) {
		if dir, ok := w.Flag("record-keys-dir"); ok {
			t.Errorf("the webhook (shard %q) has --record-keys-dir=%s", shard, dir)
		}
	}
	for _, d := range r.webhooks {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "record-keys" || (v.Secret != nil && v.Secret.SecretName == recordKeysSecret) {
				t.Errorf("%s has the volume %s", d.Name, v.Name)
			}
		}
	}
	for _, n := range r.names() {
		if n == "Secret/"+recordKeysSecret {
			t.Errorf("the chart renders %s", n)
		}
	}
}

// generatedKey checks the Secret of record keys that the chart creates and
// returns its one key.
func generatedKey(t *testing.T, r *rendered) []byte {
	t.Helper()
	s := typed[corev1.Secret](t, r, "Secret", recordKeysSecret)
	if s.Namespace != namespace || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("the Secret is in %q of type %q", s.Namespace, s.Type)
	}
	// helm uninstall must not destroy the keys that records in kcp were
	// signed with.
	if s.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the Secret is not kept on uninstall: annotations %v", s.Annotations)
	}
	if s.Labels["app.kubernetes.io/component"] != helmchart.Webhook || s.Labels["app.kubernetes.io/instance"] != release {
		t.Errorf("the Secret's labels: %v", s.Labels)
	}
	if len(s.Data) != 1 || len(s.StringData) != 0 {
		t.Fatalf("want one key in data, got keys %v and stringData %v", len(s.Data), len(s.StringData))
	}
	key, ok := s.Data["key-1"]
	if !ok {
		t.Fatalf("the key is not key-1")
	}
	// randAlphaNum: letters and digits, no newline the webhook would trim.
	if len(key) < minKeyLength || !regexp.MustCompile(`^[A-Za-z0-9]+$`).Match(key) {
		t.Errorf("the key has %d bytes (want at least %d letters and digits)", len(key), minKeyLength)
	}
	if got := r.bins.Secrets[recordKeysSecret]["key-1"]; !slices.Equal(got, key) {
		t.Error("helmchart.Binaries.Secrets does not hold the rendered key")
	}
	return key
}

// By default the chart creates a Secret with one random key and every
// webhook Deployment mounts it; webhook.recordKeys.existingSecret mounts
// another Secret instead; webhook.recordKeys.enabled=false mounts none and
// leaves deferred deletion off. (That an upgrade keeps the key needs a
// cluster for `lookup`; `helm template` renders a new key every time.)
func TestRecordKeys(t *testing.T) {
	shards := []any{
		map[string]any{"name": "root", "url": "https://root.kcp.example:6443"},
		map[string]any{"name": "shard-1", "url": "https://shard-1.kcp.example:6443"},
	}
	t.Run("generated", func(t *testing.T) {
		r := render(t, nil)
		checkRecordKeys(t, r, recordKeysSecret)
		key := generatedKey(t, r)
		if again := generatedKey(t, render(t, nil)); slices.Equal(again, key) {
			t.Error("two renderings generate the same key")
		}
	})
	t.Run("generated, shared by the webhooks of all shards", func(t *testing.T) {
		r := render(t, map[string]any{"webhook": map[string]any{"shards": shards}})
		if len(r.webhooks) != 2 || r.webhook != nil {
			t.Fatalf("want two webhook Deployments, one per shard: %v", r.names())
		}
		checkRecordKeys(t, r, recordKeysSecret)
		generatedKey(t, r)
	})
	t.Run("existing Secret", func(t *testing.T) {
		for _, values := range []map[string]any{
			{"webhook": map[string]any{"recordKeys": map[string]any{"existingSecret": "kcp-record-keys"}}},
			{"webhook": map[string]any{"recordKeys": map[string]any{"existingSecret": "kcp-record-keys"}, "shards": shards}},
		} {
			r := render(t, values)
			checkRecordKeys(t, r, "kcp-record-keys")
			for _, n := range r.names() {
				if n == "Secret/"+recordKeysSecret || n == "Secret/kcp-record-keys" {
					t.Errorf("with an existing Secret the chart renders %s", n)
				}
			}
			if len(r.bins.Secrets) != 0 {
				t.Errorf("the chart renders Secrets %v", r.bins.Secrets)
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		for _, values := range []map[string]any{
			{"webhook": map[string]any{"recordKeys": map[string]any{"enabled": false}}},
			{"webhook": map[string]any{"recordKeys": map[string]any{"enabled": false}, "shards": shards}},
		} {
			r := render(t, values)
			checkNoRecordKeys(t, r)
		}
	})
	t.Run("durations", func(t *testing.T) {
		r := render(t, map[string]any{"webhook": map[string]any{"deferredDeletionTTL": "168h", "relabelInterval": "1m"}})
		for f, want := range map[string]string{"deferred-deletion-ttl": "168h", "relabel-interval": "1m"} {
			if v := flag(t, r.bins.Webhook, f); v != want {
				t.Errorf("--%s=%s, want %s", f, v, want)
			}
		}
	})
}
