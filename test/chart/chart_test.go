// Package chart_test checks the Helm chart in deploy/charts/dependency-controller:
// `helm lint` and `helm template` with the default values, with each TLS mode
// and with the optional features on; every rendered object against the
// Kubernetes OpenAPI schemas (validate_test.go); the properties the
// deployment relies on (below), among them the keys of the webhook's records
// (recordkeys_test.go); that the chart passes exactly the flags the binaries
// define (flags_test.go); values.schema.json, the documentation of the
// values and the chart's version (values_test.go); the alerts and the
// dashboard (monitoring_test.go); and that the kcp-operator samples issue
// the identities the chart mounts (samples_test.go).
//
// The tests run bin/helm-<version> and bin/validate-manifests, which `make
// test` builds (`make helm validate-manifests`); they fail, naming the make
// target, if those are missing.
package chart_test

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opendefensecloud/dependency-controller/test/helmchart"
)

const (
	release   = "dc"
	namespace = "dep-ctrl"
	// fullname is the prefix of every object name for the release "dc".
	fullname          = "dc-dependency-controller"
	servingSecret     = fullname + "-webhook-tls"
	recordKeysSecret  = fullname + "-record-keys"
	webhookService    = fullname + "-webhook"
	defaultWebhookURL = "https://" + webhookService + "." + namespace + ".svc:443/validate"
)

// rendered is the chart rendered with some values, checked by
// validateManifest.
type rendered struct {
	objs       []*unstructured.Unstructured
	bins       *helmchart.Binaries
	controller *appsv1.Deployment
	// webhook is the webhook's Deployment for every shard; nil with
	// webhook.shards.
	webhook *appsv1.Deployment
	// webhooks are all the webhook's Deployments: webhook, or one per
	// shard.
	webhooks []*appsv1.Deployment
}

// render lints and renders the chart with values, validates every object
// and decodes the two Deployments.
func render(t *testing.T, values map[string]any) *rendered {
	t.Helper()
	ctx := context.Background()
	opts := helmchart.Options{ReleaseName: release, Namespace: namespace, Values: values}
	if out, err := helmchart.Lint(ctx, opts); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	manifest, err := helmchart.Render(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := helmchart.Objects(manifest)
	if err != nil {
		t.Fatal(err)
	}
	validateManifest(t, manifest, objs)
	bins, err := helmchart.BinariesFrom(objs)
	if err != nil {
		t.Fatal(err)
	}
	r := &rendered{objs: objs, bins: bins}
	r.controller = typed[appsv1.Deployment](t, r, "Deployment", fullname+"-controller")
	if len(bins.ShardWebhooks) == 0 {
		r.webhook = typed[appsv1.Deployment](t, r, "Deployment", fullname+"-webhook")
	}
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetLabels()["app.kubernetes.io/component"] == helmchart.Webhook {
			r.webhooks = append(r.webhooks, typed[appsv1.Deployment](t, r, "Deployment", o.GetName()))
		}
	}
	return r
}

// find returns the rendered object of a kind and name, or nil.
func (r *rendered) find(kind, name string) *unstructured.Unstructured {
	for _, o := range r.objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// names lists the rendered objects as Kind/name, sorted.
func (r *rendered) names() []string {
	var out []string
	for _, o := range r.objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	sort.Strings(out)
	return out
}

// typed returns a rendered built-in object, strictly decoded into T.
func typed[T any](t *testing.T, r *rendered, kind, name string) *T {
	t.Helper()
	o := r.find(kind, name)
	if o == nil {
		t.Fatalf("no %s %s among %v", kind, name, r.names())
	}
	obj, _, err := decodeStrict(o)
	if err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
	out, ok := any(obj).(*T)
	if !ok {
		t.Fatalf("%s %s decoded as %T", kind, name, obj)
	}
	return out
}

// nested returns a string field of a rendered custom resource.
func nested(t *testing.T, o *unstructured.Unstructured, fields ...string) string {
	t.Helper()
	v, _, err := unstructured.NestedString(o.Object, fields...)
	if err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return v
}

func TestDefaults(t *testing.T) {
	r := render(t, nil)
	checkCommon(t, r, servingSecret, servingCA)

	want := []string{
		"Certificate/" + fullname + "-ca",
		"Certificate/" + fullname + "-webhook",
		"Deployment/" + fullname + "-controller",
		"Deployment/" + fullname + "-webhook",
		"Issuer/" + fullname + "-ca",
		"Issuer/" + fullname + "-selfsigned",
		"PodDisruptionBudget/" + fullname + "-webhook",
		"Secret/" + recordKeysSecret,
		"Service/" + fullname + "-controller-metrics",
		"Service/" + fullname + "-webhook",
		"Service/" + fullname + "-webhook-metrics",
		"ServiceAccount/" + fullname + "-controller",
		"ServiceAccount/" + fullname + "-webhook",
	}
	if got := r.names(); !slices.Equal(got, want) {
		t.Errorf("objects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The self-signed chain: bootstrap Issuer -> CA Certificate -> CA
	// Issuer -> serving Certificate, written to the Secret both
	// Deployments mount.
	selfSigned := r.find("Issuer", fullname+"-selfsigned")
	if _, ok := selfSigned.Object["spec"].(map[string]any)["selfSigned"]; !ok {
		t.Errorf("the bootstrap Issuer is not self-signed: %v", selfSigned.Object["spec"])
	}
	ca := r.find("Certificate", fullname+"-ca")
	if isCA, _, _ := unstructured.NestedBool(ca.Object, "spec", "isCA"); !isCA || nested(t, ca, "spec", "issuerRef", "name") != fullname+"-selfsigned" {
		t.Errorf("the CA Certificate is not a CA signed by the bootstrap Issuer: %v", ca.Object["spec"])
	}
	if got := nested(t, r.find("Issuer", fullname+"-ca"), "spec", "ca", "secretName"); got != nested(t, ca, "spec", "secretName") {
		t.Errorf("the CA Issuer uses Secret %q, not the CA Certificate's", got)
	}
	serving := r.find("Certificate", fullname+"-webhook")
	if got := nested(t, serving, "spec", "issuerRef", "name"); got != fullname+"-ca" {
		t.Errorf("the serving Certificate is issued by %q, not the CA Issuer", got)
	}
	checkServingCertificate(t, r, nil)

	if v, _ := r.bins.Controller.Flag("webhook-url"); v != defaultWebhookURL {
		t.Errorf("--webhook-url=%s, want the webhook Service's %s", v, defaultWebhookURL)
	}
	for f, want := range map[string]string{"deferred-deletion-ttl": "24h", "relabel-interval": "30s", "replay-interval": "30s", "clearance-interval": "30s"} {
		if v := flag(t, r.bins.Webhook, f); v != want {
			t.Errorf("--%s=%s, want the default %s", f, v, want)
		}
	}
	checkRecordKeys(t, r, recordKeysSecret)
	for _, d := range []*appsv1.Deployment{r.controller, r.webhook} {
		c := d.Spec.Template.Spec.Containers[0]
		if !strings.HasSuffix(c.Image, ":"+chartAppVersion(t)) {
			t.Errorf("%s: image %s is not tagged with the chart's appVersion", d.Name, c.Image)
		}
		tsc := d.Spec.Template.Spec.TopologySpreadConstraints
		if len(tsc) != 1 || tsc[0].TopologyKey != corev1.LabelHostname || tsc[0].LabelSelector == nil ||
			tsc[0].LabelSelector.MatchLabels["app.kubernetes.io/component"] != d.Spec.Selector.MatchLabels["app.kubernetes.io/component"] {
			t.Errorf("%s: want the pods spread over nodes by default, got %+v", d.Name, tsc)
		}
	}
	pdb := typed[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", fullname+"-webhook")
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("the PodDisruptionBudget does not allow one webhook pod down: %+v", pdb.Spec)
	}
	if !selects(pdb.Spec.Selector.MatchLabels, r.webhook) {
		t.Errorf("the PodDisruptionBudget does not select the webhook pods")
	}
}

func TestCertManagerWithExistingIssuer(t *testing.T) {
	r := render(t, map[string]any{
		"tls": map[string]any{
			"certManager": map[string]any{"issuerRef": map[string]any{"name": "corp-ca", "kind": "ClusterIssuer"}},
			"dnsNames":    []any{"dependency-webhook.example.com"},
			"ipAddresses": []any{"10.0.0.10"},
		},
		"controller": map[string]any{"webhookURL": "https://dependency-webhook.example.com:8443/validate"},
	})
	checkCommon(t, r, servingSecret, servingCA)
	for _, n := range r.names() {
		if strings.HasPrefix(n, "Issuer/") || n == "Certificate/"+fullname+"-ca" {
			t.Errorf("with an existing issuer the chart creates %s", n)
		}
	}
	serving := r.find("Certificate", fullname+"-webhook")
	if nested(t, serving, "spec", "issuerRef", "name") != "corp-ca" || nested(t, serving, "spec", "issuerRef", "kind") != "ClusterIssuer" {
		t.Errorf("the serving Certificate is not issued by the given issuer: %v", serving.Object["spec"])
	}
	checkServingCertificate(t, r, []string{"dependency-webhook.example.com"})
	if ips, _, _ := unstructured.NestedStringSlice(serving.Object, "spec", "ipAddresses"); !slices.Equal(ips, []string{"10.0.0.10"}) {
		t.Errorf("ipAddresses %v", ips)
	}
	if v, _ := r.bins.Controller.Flag("webhook-url"); v != "https://dependency-webhook.example.com:8443/validate" {
		t.Errorf("--webhook-url=%s, want the value", v)
	}
}

func TestSecretMode(t *testing.T) {
	r := render(t, map[string]any{
		"tls": map[string]any{"mode": "secret", "secret": map[string]any{"name": "my-webhook-tls"}},
	})
	checkCommon(t, r, "my-webhook-tls", helmchart.FileSource{Kind: "Secret", Name: "my-webhook-tls", Key: "ca.crt"})
	for _, o := range r.objs {
		if o.GroupVersionKind().Group == "cert-manager.io" {
			t.Errorf("secret mode renders %s/%s", o.GetKind(), o.GetName())
		}
	}
}

// ServiceMonitors, the NetworkPolicy and client certificate authentication
// with a CA from a Secret.
func TestOptionalFeatures(t *testing.T) {
	r := render(t, map[string]any{
		"metrics": map[string]any{"serviceMonitor": map[string]any{
			"enabled": true, "interval": "15s", "labels": map[string]any{"release": "prometheus"},
		}},
		"webhook": map[string]any{
			"networkPolicy": map[string]any{
				"enabled": true,
				"from": []any{map[string]any{
					"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "kcp"}},
				}},
				"metricsFrom": []any{map[string]any{
					"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}},
				}},
			},
			"clientAuth": map[string]any{
				"enabled": true, "secretName": "kcp-admission-ca", "allowedNames": []any{"kcp-admission", "kcp-shard"},
			},
		},
	})
	checkCommon(t, r, servingSecret, servingCA)

	for _, component := range []string{"controller", "webhook"} {
		sm := r.find("ServiceMonitor", fullname+"-"+component)
		if sm == nil {
			t.Fatalf("no ServiceMonitor for the %s: %v", component, r.names())
		}
		svc := typed[corev1.Service](t, r, "Service", fullname+"-"+component+"-metrics")
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		for k, v := range sel {
			if svc.Labels[k] != v {
				t.Errorf("the %s ServiceMonitor selects %v, which its metrics Service's labels %v do not match", component, sel, svc.Labels)
			}
		}
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" || eps[0].(map[string]any)["interval"] != "15s" {
			t.Errorf("the %s ServiceMonitor's endpoints: %v", component, eps)
		}
		if sm.GetLabels()["release"] != "prometheus" {
			t.Errorf("the %s ServiceMonitor lacks the extra label: %v", component, sm.GetLabels())
		}
	}

	np := typed[networkingv1.NetworkPolicy](t, r, "NetworkPolicy", fullname+"-webhook")
	if !selects(np.Spec.PodSelector.MatchLabels, r.webhook) || selects(np.Spec.PodSelector.MatchLabels, r.controller) {
		t.Errorf("the NetworkPolicy does not select exactly the webhook pods: %v", np.Spec.PodSelector)
	}
	from := map[string][]networkingv1.NetworkPolicyPeer{}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			from[p.Port.String()] = rule.From
		}
	}
	if len(from) != 3 || len(from["webhook"]) != 1 || from["webhook"][0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "kcp" ||
		len(from["metrics"]) != 1 || from["health"] != nil {
		t.Errorf("the NetworkPolicy admits %v; want the webhook port from kcp, metrics from monitoring, health from anywhere", from)
	}

	w := r.bins.Webhook
	file, ok := w.Flag("client-ca-file")
	if src := w.Files()[file]; !ok || src != (helmchart.FileSource{Kind: "Secret", Name: "kcp-admission-ca", Key: "ca.crt"}) {
		t.Errorf("--client-ca-file=%s comes from %+v", file, src)
	}
	if v, _ := w.Flag("allowed-client-names"); v != "kcp-admission,kcp-shard" {
		t.Errorf("--allowed-client-names=%s", v)
	}
}

// Metrics off, the client CA from a ConfigMap, an image digest, and the
// values that change flags.
func TestOtherValues(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	r := render(t, map[string]any{
		"metrics": map[string]any{"enabled": false},
		"logging": map[string]any{"level": "2", "encoder": "console"},
		"controller": map[string]any{
			"image":                 map[string]any{"tag": "v9", "digest": digest},
			"failurePolicy":         "Ignore",
			"webhookTimeoutSeconds": 10,
			"leaderElection":        map[string]any{"namespace": "leases"},
			"logLevel":              "debug",
			"extraArgs":             []any{"--zap-devel=false"},
			"webhookCABundle":       map[string]any{"secretName": "kcp-trusted-ca", "key": "bundle.pem"},
		},
		"webhook": map[string]any{
			"image":               map[string]any{"tag": "v9"},
			"port":                10443,
			"frontProxyURL":       "https://kcp.example.com:6443",
			"clientAuth":          map[string]any{"enabled": true, "configMapName": "kcp-client-ca", "key": "ca.pem"},
			"podDisruptionBudget": map[string]any{"minAvailable": "50%"},
			"service":             map[string]any{"type": "LoadBalancer", "port": 8443},
		},
	})
	checkCommon(t, r, servingSecret, helmchart.FileSource{Kind: "Secret", Name: "kcp-trusted-ca", Key: "bundle.pem"})

	if img := r.controller.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/opendefensecloud/dependency-controller@"+digest {
		t.Errorf("the controller's image %s does not use the digest over the tag", img)
	}
	if img := r.webhook.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/opendefensecloud/dependency-webhook:v9" {
		t.Errorf("the webhook's image %s does not use the tag", img)
	}
	for _, n := range r.names() {
		if strings.HasSuffix(n, "-metrics") || strings.HasPrefix(n, "ServiceMonitor/") {
			t.Errorf("metrics are off, yet the chart renders %s", n)
		}
	}
	c, w := r.bins.Controller, r.bins.Webhook
	for _, f := range []struct {
		inv         helmchart.Invocation
		flag, value string
	}{
		{c, "metrics-bind-address", "0"},
		{w, "metrics-bind-address", "0"},
		{c, "failure-policy", "Ignore"},
		{c, "webhook-timeout-seconds", "10"},
		{c, "leader-election-namespace", "leases"},
		{c, "zap-log-level", "debug"},
		{w, "zap-log-level", "2"},
		{w, "zap-encoder", "console"},
		{c, "zap-devel", "false"},
		{w, "port", "10443"},
		{w, "front-proxy-url", "https://kcp.example.com:6443"},
		{c, "webhook-url", "https://" + webhookService + "." + namespace + ".svc:8443/validate"},
	} {
		if v, _ := f.inv.Flag(f.flag); v != f.value {
			t.Errorf("--%s=%s, want %s", f.flag, v, f.value)
		}
	}
	if src := w.Files()[flag(t, w, "client-ca-file")]; src != (helmchart.FileSource{Kind: "ConfigMap", Name: "kcp-client-ca", Key: "ca.pem"}) {
		t.Errorf("--client-ca-file comes from %+v", src)
	}
	if _, ok := w.Flag("allowed-client-names"); ok {
		t.Error("--allowed-client-names without allowed names")
	}
	pdb := typed[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", fullname+"-webhook")
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.String() != "50%" || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("the PodDisruptionBudget: %+v, want minAvailable 50%% only", pdb.Spec)
	}
	if svc := typed[corev1.Service](t, r, "Service", webhookService); svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("the webhook Service is %s", svc.Spec.Type)
	}
}

// flag returns the value of a flag the test expects to be set.
func flag(t *testing.T, inv helmchart.Invocation, name string) string {
	t.Helper()
	v, ok := inv.Flag(name)
	if !ok {
		t.Fatalf("no --%s in %q", name, inv.Args)
	}
	return v
}

// servingCA is where the controller's --webhook-ca-bundle comes from by
// default: the ca.crt that cert-manager writes into the serving Secret.
var servingCA = helmchart.FileSource{Kind: "Secret", Name: servingSecret, Key: "ca.crt"}

// checkCommon checks what must hold for every set of values: both
// Deployments, their flags, the mounted Secrets, security contexts, probes,
// ports and the webhook Service. serving is the Secret with the webhook's
// serving certificate, ca where the controller's CA bundle comes from.
func checkCommon(t *testing.T, r *rendered, serving string, ca helmchart.FileSource) {
	t.Helper()
	c, w := r.bins.Controller, r.bins.Webhook

	for _, d := range []*appsv1.Deployment{r.controller, r.webhook} {
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("%s: replicas %v, want 2", d.Name, d.Spec.Replicas)
		}
		if !selects(d.Spec.Selector.MatchLabels, d) {
			t.Errorf("%s: the selector does not match its pods", d.Name)
		}
		checkPod(t, d)
	}
	if selects(r.controller.Spec.Selector.MatchLabels, r.webhook) || selects(r.webhook.Spec.Selector.MatchLabels, r.controller) {
		t.Error("the selectors of the controller and the webhook overlap")
	}

	for name, inv := range map[string]helmchart.Invocation{"controller": c, "webhook": w} {
		// The webhook elects the replica that replays deferred deletions.
		if v, _ := inv.Flag("leader-elect"); v != "true" {
			t.Errorf("%s: --leader-elect=%s, want true", name, v)
		}
	}

	// Both read kcp through a kubeconfig mounted from a Secret.
	for name, inv := range map[string]helmchart.Invocation{"controller": c, "webhook": w} {
		src, ok := inv.Files()[flag(t, inv, "kubeconfig")]
		if !ok || src.Kind != "Secret" {
			t.Errorf("the %s's --kubeconfig is not a file of a mounted Secret: %+v", name, inv.Mounts)
		}
		for _, m := range inv.Mounts {
			if !m.ReadOnly {
				t.Errorf("the %s mounts %s %s at %s writable", name, m.Kind, m.Name, m.MountPath)
			}
		}
	}

	// The controller gets the CA that verifies the webhook's serving
	// certificate from a mounted Secret, and nothing else of it.
	caFile := flag(t, c, "webhook-ca-bundle")
	if src, ok := c.Files()[caFile]; !ok || src != ca {
		t.Errorf("--webhook-ca-bundle=%s comes from %+v (mounts %+v), want %+v", caFile, src, c.Mounts, ca)
	}
	for _, m := range c.Mounts {
		for _, key := range m.Files {
			if key == "tls.key" {
				t.Errorf("the controller mounts the private key of %s", m.Name)
			}
		}
		if m.Files == nil {
			t.Errorf("the controller mounts all of %s %s", m.Kind, m.Name)
		}
	}

	// The webhook serves the certificate from the mounted serving Secret,
	// mounted as a directory so that renewals reach it.
	certDir := flag(t, w, "cert-dir")
	m, rel, ok := w.MountOf(certDir)
	if !ok || rel != "." || m.SubPath != "" || m.Kind != "Secret" || m.Name != serving {
		t.Errorf("--cert-dir=%s is not the mounted Secret %s: %+v", certDir, serving, m)
	}
	for _, f := range []string{"tls-cert-file", "tls-key-file"} {
		name := flag(t, w, f)
		if src, ok := w.Files()[path.Join(certDir, name)]; !ok || src.Name != serving || src.Key != name {
			t.Errorf("--%s=%s is not a key of %s in --cert-dir: %+v", f, name, serving, m.Files)
		}
	}

	// The record keys, if on, are every key of a mounted Secret, as a
	// directory, so that keys added or removed reach the webhook.
	if dir, ok := w.Flag("record-keys-dir"); ok {
		if m, rel, ok := w.MountOf(dir); !ok || rel != "." || m.SubPath != "" || m.Kind != "Secret" || m.Files != nil {
			t.Errorf("--record-keys-dir=%s is not a directory of all keys of a mounted Secret: %+v", dir, m)
		}
	}

	// The webhook Service is what kcp calls.
	svc := typed[corev1.Service](t, r, "Service", webhookService)
	if !selects(svc.Spec.Selector, r.webhook) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "webhook" {
		t.Errorf("the webhook Service does not send to the webhook port: %+v", svc.Spec)
	}
	if port := containerPort(t, r.webhook, "webhook"); strconv.Itoa(int(port)) != flag(t, w, "port") {
		t.Errorf("the container port webhook (%d) is not --port=%s", port, flag(t, w, "port"))
	}
	u, err := url.Parse(flag(t, c, "webhook-url"))
	if err != nil || u.Scheme != "https" || !strings.HasSuffix(u.Path, flag(t, w, "path")) {
		t.Errorf("--webhook-url=%s is not an https URL of the webhook's --path", u)
	}

	for _, sa := range []string{"controller", "webhook"} {
		acct := typed[corev1.ServiceAccount](t, r, "ServiceAccount", fullname+"-"+sa)
		if acct.AutomountServiceAccountToken == nil || *acct.AutomountServiceAccountToken {
			t.Errorf("the %s's ServiceAccount mounts its token", sa)
		}
	}
}

// checkPod checks a Deployment's pod: restricted security, probes on the
// health port, ports matching the flags, resources, read-only mounts.
func checkPod(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: the pod mounts a service account token", d.Name)
	}
	if pod.ServiceAccountName == "" || pod.ServiceAccountName == "default" {
		t.Errorf("%s: runs as ServiceAccount %q", d.Name, pod.ServiceAccountName)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod security context %+v is not restricted", d.Name, psc)
	}
	containers := append(append([]corev1.Container(nil), pod.InitContainers...), pod.Containers...)
	if len(pod.Containers) != 1 {
		t.Errorf("%s: %d containers, want 1", d.Name, len(pod.Containers))
	}
	for _, ctr := range containers {
		id := d.Name + "/" + ctr.Name
		sc := ctr.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
			sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
			(sc.Privileged != nil && *sc.Privileged) {
			t.Errorf("%s: security context %+v is not restricted", id, sc)
		}
		if len(ctr.Resources.Requests) == 0 || len(ctr.Resources.Limits) == 0 {
			t.Errorf("%s: resources %+v lack requests or limits", id, ctr.Resources)
		}
		for _, vm := range ctr.VolumeMounts {
			if !vm.ReadOnly {
				t.Errorf("%s: %s is mounted writable", id, vm.MountPath)
			}
		}
	}

	ctr := pod.Containers[0]
	inv := helmchart.Invocation{Args: ctr.Args}
	health := containerPort(t, d, "health")
	if addr := flag(t, inv, "health-probe-bind-address"); addr != fmt.Sprintf(":%d", health) {
		t.Errorf("%s: --health-probe-bind-address=%s, but the health port is %d", d.Name, addr, health)
	}
	for probe, p := range map[string]*corev1.Probe{"/healthz": ctr.LivenessProbe, "/readyz": ctr.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != probe || p.HTTPGet.Port.String() != "health" {
			t.Errorf("%s: want a probe of %s on the health port, got %+v", d.Name, probe, p)
		}
	}
	if addr := flag(t, inv, "metrics-bind-address"); addr != "0" {
		if metrics := containerPort(t, d, "metrics"); addr != fmt.Sprintf(":%d", metrics) {
			t.Errorf("%s: --metrics-bind-address=%s, but the metrics port is %d", d.Name, addr, metrics)
		}
	}
}

// checkServingCertificate checks that the serving Certificate covers the
// webhook Service's DNS names, the extra ones, and the host of the URL the
// controller gives kcp.
func checkServingCertificate(t *testing.T, r *rendered, extra []string) {
	t.Helper()
	cert := r.find("Certificate", fullname+"-webhook")
	if got := nested(t, cert, "spec", "secretName"); got != servingSecret {
		t.Errorf("the serving Certificate writes %s, not the Secret the webhook mounts (%s)", got, servingSecret)
	}
	names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	want := append([]string{
		webhookService,
		webhookService + "." + namespace,
		webhookService + "." + namespace + ".svc",
		webhookService + "." + namespace + ".svc.cluster.local",
	}, extra...)
	if !slices.Equal(names, want) {
		t.Errorf("dnsNames %v, want %v", names, want)
	}
	u, err := url.Parse(flag(t, r.bins.Controller, "webhook-url"))
	if err != nil || !slices.Contains(names, u.Hostname()) {
		t.Errorf("the serving certificate does not cover the host of --webhook-url %s", u)
	}
}

// containerPort returns the number of the named port of a Deployment's
// container.
func containerPort(t *testing.T, d *appsv1.Deployment, name string) int32 {
	t.Helper()
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("%s: no port %q", d.Name, name)
	return 0
}

// selects reports whether labels select the pods of a Deployment.
func selects(labels map[string]string, d *appsv1.Deployment) bool {
	if len(labels) == 0 {
		return false
	}
	for k, v := range labels {
		if d.Spec.Template.Labels[k] != v {
			return false
		}
	}
	return true
}
