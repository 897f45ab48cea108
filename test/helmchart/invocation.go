package helmchart

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Components of the chart, the values of the app.kubernetes.io/component
// label of their Deployments and the names of their containers.
const (
	Controller = "controller"
	Webhook    = "webhook"
)

// Binaries is how the chart runs the two binaries.
type Binaries struct {
	// Controller is the container of the controller's Deployment.
	Controller Invocation
	// Webhook is the container of the webhook's Deployment, if the chart
	// renders one for every shard.
	Webhook Invocation
	// ShardWebhooks are the containers of the webhook's Deployments per
	// kcp shard (webhook.shards), by shard name.
	ShardWebhooks map[string]Invocation
	// Secrets are the contents of the Secrets the chart renders, by name
	// and key: by default RecordKeysSecret(<fullname>), which the webhook
	// mounts at --record-keys-dir. `helm template` sees no cluster, so each
	// rendering holds a new random key: a caller that renders more than once
	// and runs webhooks of several renderings together (they must share
	// their keys) should keep the Secrets of the first.
	Secrets map[string]map[string][]byte
}

// RecordKeysSecret returns the name of the Secret with the keys of the
// records of deferred deletions that the chart creates for a release whose
// objects are named <fullname>-... (e.g. "dependency-controller" for
// DefaultReleaseName), unless webhook.recordKeys.existingSecret names one.
func RecordKeysSecret(fullname string) string {
	return fullname + "-record-keys"
}

// ShardLabel is the label of a webhook Deployment of one shard.
const ShardLabel = "dependencies.opendefense.cloud/shard"

// Invocation is how the chart runs one binary: the container's arguments
// (the image's entrypoint is the binary itself) and the Secrets and
// ConfigMaps mounted into it.
type Invocation struct {
	// Args are the container's arguments, in order.
	Args []string
	// Mounts are the container's mounts of Secret and ConfigMap volumes,
	// in the order of its volumeMounts. Mounts of other volumes are left
	// out.
	Mounts []Mount
}

// Mount is a Secret or ConfigMap volume mounted into a container.
type Mount struct {
	// MountPath is the directory the volume is mounted at (or, with
	// SubPath, the file).
	MountPath string
	// SubPath is the volume mount's subPath, usually empty.
	SubPath string
	// ReadOnly is the volume mount's readOnly.
	ReadOnly bool
	// Kind is "Secret" or "ConfigMap".
	Kind string
	// Name is the name of the Secret or ConfigMap.
	Name string
	// Files maps every file the volume projects (its path relative to the
	// volume) to the key of the Secret or ConfigMap it holds. Nil if the
	// volume lists no items, so that it holds every key under its own name.
	Files map[string]string
}

// FileSource is where a file in a container comes from.
type FileSource struct {
	// Kind is "Secret" or "ConfigMap".
	Kind string
	// Name is the name of the Secret or ConfigMap.
	Name string
	// Key is the key of the file's content in it.
	Key string
}

// RenderBinaries renders the chart with opts and returns how it runs the
// controller and the webhook.
func RenderBinaries(ctx context.Context, opts Options) (*Binaries, error) {
	manifest, err := Render(ctx, opts)
	if err != nil {
		return nil, err
	}
	objs, err := Objects(manifest)
	if err != nil {
		return nil, err
	}
	return BinariesFrom(objs)
}

// BinariesFrom finds the Deployments of the controller and the webhook among
// rendered objects, by their app.kubernetes.io/component label, and returns
// their containers' invocations: one webhook Deployment, or one per shard
// (ShardLabel).
func BinariesFrom(objs []*unstructured.Unstructured) (*Binaries, error) {
	var b Binaries
	var whole []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Secret" && o.GetAPIVersion() == "v1" {
			data, err := secretData(o)
			if err != nil {
				return nil, err
			}
			if b.Secrets == nil {
				b.Secrets = map[string]map[string][]byte{}
			}
			b.Secrets[o.GetName()] = data
			continue
		}
		if o.GetKind() != "Deployment" || o.GetLabels()["app.kubernetes.io/component"] != Webhook {
			whole = append(whole, o)
			continue
		}
		shard := o.GetLabels()[ShardLabel]
		if shard == "" {
			whole = append(whole, o)
			continue
		}
		inv, err := invocationOf([]*unstructured.Unstructured{o}, Webhook)
		if err != nil {
			return nil, fmt.Errorf("%s of shard %s: %w", Webhook, shard, err)
		}
		if b.ShardWebhooks == nil {
			b.ShardWebhooks = map[string]Invocation{}
		}
		b.ShardWebhooks[shard] = inv
	}
	for _, component := range []string{Controller, Webhook} {
		if component == Webhook && len(b.ShardWebhooks) > 0 {
			continue
		}
		inv, err := invocationOf(whole, component)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", component, err)
		}
		if component == Controller {
			b.Controller = inv
		} else {
			b.Webhook = inv
		}
	}
	return &b, nil
}

// secretData returns the content of a rendered Secret by key: its data,
// decoded, and its stringData, which overrides data as the API server
// merges them.
func secretData(o *unstructured.Unstructured) (map[string][]byte, error) {
	raw, err := json.Marshal(o.Object)
	if err != nil {
		return nil, fmt.Errorf("encoding Secret %s: %w", o.GetName(), err)
	}
	var s corev1.Secret
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("decoding Secret %s: %w", o.GetName(), err)
	}
	out := map[string][]byte{}
	for k, v := range s.Data {
		out[k] = v
	}
	for k, v := range s.StringData {
		out[k] = []byte(v)
	}
	return out, nil
}

func invocationOf(objs []*unstructured.Unstructured, component string) (Invocation, error) {
	var found *appsv1.Deployment
	for _, o := range objs {
		if o.GetKind() != "Deployment" || o.GetLabels()["app.kubernetes.io/component"] != component {
			continue
		}
		if found != nil {
			return Invocation{}, fmt.Errorf("more than one Deployment: %s and %s", found.Name, o.GetName())
		}
		found = &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, found); err != nil {
			return Invocation{}, fmt.Errorf("decoding Deployment %s: %w", o.GetName(), err)
		}
	}
	if found == nil {
		return Invocation{}, fmt.Errorf("no Deployment labelled app.kubernetes.io/component=%s", component)
	}
	return invocationFrom(&found.Spec.Template.Spec, component)
}

// invocationFrom returns the invocation of the named container of a pod.
func invocationFrom(pod *corev1.PodSpec, container string) (Invocation, error) {
	var c *corev1.Container
	for i := range pod.Containers {
		if pod.Containers[i].Name == container {
			c = &pod.Containers[i]
		}
	}
	if c == nil {
		return Invocation{}, fmt.Errorf("no container %q", container)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	inv := Invocation{Args: append([]string(nil), c.Args...)}
	for _, vm := range c.VolumeMounts {
		v, ok := volumes[vm.Name]
		if !ok {
			return Invocation{}, fmt.Errorf("volume mount %q has no volume", vm.Name)
		}
		m := Mount{MountPath: vm.MountPath, SubPath: vm.SubPath, ReadOnly: vm.ReadOnly}
		var items []corev1.KeyToPath
		switch {
		case v.Secret != nil:
			m.Kind, m.Name, items = "Secret", v.Secret.SecretName, v.Secret.Items
		case v.ConfigMap != nil:
			m.Kind, m.Name, items = "ConfigMap", v.ConfigMap.Name, v.ConfigMap.Items
		default:
			continue
		}
		if len(items) > 0 {
			m.Files = map[string]string{}
			for _, it := range items {
				m.Files[it.Path] = it.Key
			}
		}
		inv.Mounts = append(inv.Mounts, m)
	}
	return inv, nil
}

// Flag returns the value of the last --name=value argument, and whether
// there is one.
func (inv Invocation) Flag(name string) (string, bool) {
	value, found := "", false
	for _, a := range inv.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			value, found = v, true
		}
	}
	return value, found
}

// Files returns, for every file path in the container that a mount
// provides, where its content comes from. Mounts without items provide
// unknown keys and are left out; their directory is in Mounts.
func (inv Invocation) Files() map[string]FileSource {
	out := map[string]FileSource{}
	for _, m := range inv.Mounts {
		for p, key := range m.Files {
			file := path.Join(m.MountPath, p)
			if m.SubPath != "" {
				if m.SubPath != p {
					continue
				}
				file = m.MountPath
			}
			out[file] = FileSource{Kind: m.Kind, Name: m.Name, Key: key}
		}
	}
	return out
}

// MountOf returns the mount that a path in the container lies in (the
// deepest one, if mounts nest), and the path relative to its mount path
// ("." for the mount path itself).
func (inv Invocation) MountOf(p string) (Mount, string, bool) {
	var best Mount
	var rel string
	found := false
	for _, m := range inv.Mounts {
		r, ok := within(m.MountPath, p)
		if ok && (!found || len(m.MountPath) > len(best.MountPath)) {
			best, rel, found = m, r, true
		}
	}
	return best, rel, found
}

// LocalArgs returns Args with every path that lies in a mount, as a whole
// argument or as the value of a --flag=value argument, replaced by the same
// path under localDir(mount): the directory where the caller has written
// that mount's files (Mount.Files names them and their keys). With that, a
// test runs a binary with exactly the chart's arguments on local files.
func (inv Invocation) LocalArgs(localDir func(Mount) (string, error)) ([]string, error) {
	out := make([]string, 0, len(inv.Args))
	for _, a := range inv.Args {
		prefix, value := "", a
		if strings.HasPrefix(a, "-") {
			name, v, ok := strings.Cut(a, "=")
			if !ok {
				out = append(out, a)
				continue
			}
			prefix, value = name+"=", v
		}
		m, rel, ok := inv.MountOf(value)
		if !ok {
			out = append(out, a)
			continue
		}
		dir, err := localDir(m)
		if err != nil {
			return nil, fmt.Errorf("local directory for %s %s mounted at %s: %w", m.Kind, m.Name, m.MountPath, err)
		}
		out = append(out, prefix+filepath.Join(dir, filepath.FromSlash(rel)))
	}
	return out, nil
}

// within reports whether p is dir or lies below it, and returns p relative
// to dir. Both are absolute container paths.
func within(dir, p string) (string, bool) {
	if !path.IsAbs(p) {
		return "", false
	}
	dir, p = path.Clean(dir), path.Clean(p)
	if p == dir {
		return ".", true
	}
	rel, ok := strings.CutPrefix(p, strings.TrimSuffix(dir, "/")+"/")
	return rel, ok
}
