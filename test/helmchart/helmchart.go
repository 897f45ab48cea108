// Package helmchart renders the project's Helm chart
// (deploy/charts/dependency-controller) with the Helm binary pinned in
// hack/tools/helm, and tells how the chart runs the controller and the
// webhook: their command line arguments, the Secrets and ConfigMaps
// mounted into their containers, and the Secrets the chart creates itself
// (the keys of the webhook's records). The chart tests (test/chart) check the
// chart with it; the e2e suite can run both binaries with exactly the chart's
// arguments, with the mounted files replaced by local ones (see
// Invocation.LocalArgs and WriteSecretVolume).
//
// Rendering needs bin/helm-<version>, which `make helm` builds; it needs no
// cluster and no network.
package helmchart

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/opendefensecloud/dependency-controller/test/repo"
)

const (
	// DefaultReleaseName is the release name Render uses by default.
	DefaultReleaseName = "dependency-controller"
	// DefaultNamespace is the release namespace Render uses by default.
	DefaultNamespace = "dependency-controller"
)

// RepoRoot returns the root directory of the repository.
func RepoRoot() string {
	return repo.Root()
}

// ChartDir returns the directory of the chart.
func ChartDir() string {
	return filepath.Join(RepoRoot(), "deploy", "charts", "dependency-controller")
}

// HelmVersion returns the version of Helm pinned in hack/tools/helm/go.mod,
// e.g. v3.22.0.
func HelmVersion() (string, error) {
	return requiredVersion(filepath.Join(RepoRoot(), "hack", "tools", "helm", "go.mod"), "helm.sh/helm/v3")
}

// requiredVersion returns the version of module that a go.mod file
// requires, in either form of require directive.
func requiredVersion(gomod, module string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", fmt.Errorf("reading the version of %s: %w", module, err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 0 && fields[0] == "require" {
			fields = fields[1:]
		}
		if len(fields) >= 2 && fields[0] == module {
			return fields[1], nil
		}
	}
	if err := s.Err(); err != nil {
		return "", fmt.Errorf("reading %s: %w", gomod, err)
	}
	return "", fmt.Errorf("%s does not require %s", gomod, module)
}

// HelmBinary returns the path of the pinned Helm binary: $HELM if set,
// otherwise bin/helm-<version> in the repository. The error says to run
// `make helm` if the binary is missing.
func HelmBinary() (string, error) {
	if p := os.Getenv("HELM"); p != "" {
		return p, nil
	}
	v, err := HelmVersion()
	if err != nil {
		return "", err
	}
	p := filepath.Join(RepoRoot(), "bin", "helm-"+v)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("helm %s is not built (%w): run `make helm` in the repository root", v, err)
	}
	return p, nil
}

// KubeVersion returns the Kubernetes release the project pins, derived from
// the version of k8s.io/api in the repository's go.mod (v0.35.1 is
// Kubernetes v1.35.1). Render passes it to helm as --kube-version.
func KubeVersion() (string, error) {
	v, err := requiredVersion(filepath.Join(RepoRoot(), "go.mod"), "k8s.io/api")
	if err != nil {
		return "", err
	}
	rest, ok := strings.CutPrefix(v, "v0.")
	if !ok {
		return "", fmt.Errorf("unexpected k8s.io/api version %q", v)
	}
	return "v1." + rest, nil
}

// Options select how Render renders the chart. The zero value renders the
// chart's defaults.
type Options struct {
	// ReleaseName is the Helm release name; DefaultReleaseName if empty.
	ReleaseName string
	// Namespace is the release namespace; DefaultNamespace if empty.
	Namespace string
	// Values are merged over the chart's values.yaml, like a file passed
	// with --values.
	Values map[string]any
	// KubeVersion is passed as --kube-version; KubeVersion() if empty.
	KubeVersion string
	// Helm is the helm binary; HelmBinary() if empty.
	Helm string
}

// Render runs `helm template` on the chart and returns the rendered
// manifest. Helm's error output is part of the error, e.g. when
// values.schema.json rejects a value.
func Render(ctx context.Context, opts Options) ([]byte, error) {
	args, cleanup, err := helmArgs(opts, "template", opts.releaseName(), ChartDir(), "--namespace", opts.namespace())
	if err != nil {
		return nil, err
	}
	defer cleanup()
	out, err := runHelm(ctx, opts.Helm, args)
	if err != nil {
		return nil, fmt.Errorf("rendering the chart: %w", err)
	}
	return out, nil
}

// Lint runs `helm lint --strict` on the chart with the given values and
// returns its output, and an error if the chart fails.
func Lint(ctx context.Context, opts Options) ([]byte, error) {
	args, cleanup, err := helmArgs(opts, "lint", ChartDir(), "--strict", "--namespace", opts.namespace())
	if err != nil {
		return nil, err
	}
	defer cleanup()
	out, err := runHelm(ctx, opts.Helm, args)
	if err != nil {
		return out, fmt.Errorf("linting the chart: %w", err)
	}
	return out, nil
}

func (o Options) releaseName() string {
	if o.ReleaseName == "" {
		return DefaultReleaseName
	}
	return o.ReleaseName
}

func (o Options) namespace() string {
	if o.Namespace == "" {
		return DefaultNamespace
	}
	return o.Namespace
}

// helmArgs completes a helm command line with --kube-version and the
// values, written to a temporary file that cleanup removes.
func helmArgs(opts Options, args ...string) ([]string, func(), error) {
	kv := opts.KubeVersion
	if kv == "" {
		var err error
		if kv, err = KubeVersion(); err != nil {
			return nil, nil, err
		}
	}
	args = append(args, "--kube-version", kv)
	cleanup := func() {}
	if len(opts.Values) > 0 {
		data, err := yaml.Marshal(opts.Values)
		if err != nil {
			return nil, nil, fmt.Errorf("encoding the values: %w", err)
		}
		f, err := os.CreateTemp("", "helmchart-values-*.yaml")
		if err != nil {
			return nil, nil, fmt.Errorf("writing the values: %w", err)
		}
		cleanup = func() { _ = os.Remove(f.Name()) }
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("writing the values: %w", err)
		}
		args = append(args, "--values", f.Name())
	}
	return args, cleanup, nil
}

// runHelm runs helm with its configuration, cache and data directories in a
// temporary directory, so that no user or machine state (repositories,
// plugins) is read, and returns its standard output.
func runHelm(ctx context.Context, helm string, args []string) ([]byte, error) {
	if helm == "" {
		var err error
		if helm, err = HelmBinary(); err != nil {
			return nil, err
		}
	}
	home, err := os.MkdirTemp("", "helmchart-home-*")
	if err != nil {
		return nil, fmt.Errorf("creating a Helm home: %w", err)
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", filepath.Base(helm), args[0], err, msg)
	}
	return stdout.Bytes(), nil
}

// Objects splits a rendered manifest into its objects, skipping empty
// documents.
func Objects(manifest []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("splitting the manifest: %w", err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("decoding document %d: %w", len(objs), err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}
