package chart_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opendefensecloud/dependency-controller/test/helmchart"
)

// kcpOperatorKubeconfig is the shape of a kcp-operator Kubeconfig
// (operator.kcp.io/v1alpha1, after the CRD of kcp-operator v0.9.0).
var kcpOperatorKubeconfig = object([]string{"apiVersion", "kind", "metadata", "spec"}, map[string]shape{
	"apiVersion": {typ: "string", enum: []string{"operator.kcp.io/v1alpha1"}},
	"kind":       {typ: "string", enum: []string{"Kubeconfig"}},
	"metadata":   object([]string{"name"}, map[string]shape{"name": str, "namespace": str, "labels": stringMap}),
	"spec": object([]string{"secretRef", "target", "username", "validity"}, map[string]shape{
		"username":  str,
		"groups":    stringList,
		"validity":  duration,
		"secretRef": object([]string{"name"}, map[string]shape{"name": str}),
		"target": object(nil, map[string]shape{
			"frontProxyRef": object([]string{"name"}, map[string]shape{"name": str}),
			"rootShardRef":  object([]string{"name"}, map[string]shape{"name": str}),
			"shardRef":      object([]string{"name"}, map[string]shape{"name": str}),
		}),
		"targetWorkspace": {typ: "string", pattern: regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(:[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)},
	}),
})

// The kcp-operator samples issue, for the front-proxy and the dep-ctrl
// workspace, the identities the RBAC of `make deploy` binds, into the
// Secrets the chart mounts by default.
func TestKcpOperatorSamples(t *testing.T) {
	dir := filepath.Join(helmchart.RepoRoot(), "config", "samples", "kcp-operator")
	var values struct {
		Controller, Webhook struct {
			Kubeconfig struct {
				SecretName string `json:"secretName"`
				Key        string `json:"key"`
			} `json:"kubeconfig"`
		}
	}
	data, err := os.ReadFile(filepath.Join(helmchart.ChartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]struct{ user, secret, key string }{
		"kubeconfig-controller.yaml": {"dependency-controller", values.Controller.Kubeconfig.SecretName, values.Controller.Kubeconfig.Key},
		"kubeconfig-webhook.yaml":    {"dependency-webhook", values.Webhook.Kubeconfig.SecretName, values.Webhook.Kubeconfig.Key},
	} {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(data, &m); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, e := range kcpOperatorKubeconfig.validate(file, m) {
			t.Error(e)
		}
		o := &unstructured.Unstructured{Object: m}
		if got := nested(t, o, "spec", "username"); got != want.user {
			t.Errorf("%s: user %q, want %q, the subject of the RBAC in config/rbac", file, got, want.user)
		}
		if got := nested(t, o, "spec", "secretRef", "name"); got != want.secret {
			t.Errorf("%s: Secret %q, but the chart mounts %q by default", file, got, want.secret)
		}
		if want.key != "kubeconfig" {
			t.Errorf("the chart reads the kubeconfig from key %q; the kcp-operator writes it to \"kubeconfig\"", want.key)
		}
		if got := nested(t, o, "spec", "target", "frontProxyRef", "name"); got == "" {
			t.Errorf("%s: the certificate is not for the front-proxy", file)
		}
		if got := nested(t, o, "spec", "targetWorkspace"); got != "root:dep-ctrl" {
			t.Errorf("%s: targetWorkspace %q, want the dep-ctrl workspace of `make deploy`, root:dep-ctrl", file, got)
		}
	}
}
