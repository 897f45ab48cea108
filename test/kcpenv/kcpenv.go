// Package kcpenv starts a real kcp for the project's envtest suites and
// installs the project's kcp manifests into workspaces.
//
// kcp is started from the binaries in the directory named by KCP_BIN_DIR
// (BinDirEnv), or bin/ at the repository root, which `make kcp` fills with
// the pinned build, when it is unset. A missing binary is an error that names
// the command to run; suites never skip.
package kcpenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	clusterclient "github.com/kcp-dev/multicluster-provider/client"
	"github.com/kcp-dev/multicluster-provider/envtest"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	corev1alpha1 "github.com/kcp-dev/sdk/apis/core/v1alpha1"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"

	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
	"github.com/opendefensecloud/dependency-controller/internal/scheme"

	"github.com/opendefensecloud/dependency-controller/test/repo"
)

// DepCtrlExportName is the name of the project's APIExport.
const DepCtrlExportName = "dependencies.opendefense.cloud"

// RepoRoot returns the root directory of the repository.
func RepoRoot() string {
	return repo.Root()
}

// NewScheme returns the project's scheme plus the kcp core and tenancy types
// tests use.
func NewScheme() *kruntime.Scheme {
	s := scheme.New()
	utilruntime.Must(corev1alpha1.AddToScheme(s))
	utilruntime.Must(tenancyv1alpha1.AddToScheme(s))
	return s
}

// Env is a single-shard kcp started by Start.
type Env struct {
	// Config is an admin config for the server, without a workspace.
	Config *rest.Config
	// Client is an admin client for every workspace.
	Client clusterclient.ClusterClient
	// Version is the version of the kcp binary that was started.
	Version kcpversion.Info

	env *envtest.Environment
}

// ProfilerAddressEnv names the environment variable that, if set, has
// Start run kcp with its Go profiler (net/http/pprof) at that address
// (kcp's --profiler-address), e.g. for the measurements' CPU profiles.
const ProfilerAddressEnv = "KCP_PROFILER_ADDRESS"

// Start starts a single-shard kcp and returns it with an admin client.
func Start() (*Env, error) {
	assets := BinDir()
	version, err := CheckBinaries(os.Stderr, assets, "kcp")
	if err != nil {
		return nil, err
	}

	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	if addr := os.Getenv(ProfilerAddressEnv); addr != "" {
		env.Kcp.GetRootShard().Configure().Append("profiler-address", addr)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("failed to start kcp from %s: %w", assets, err)
	}
	cli, err := clusterclient.New(cfg, client.Options{Scheme: NewScheme()})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: cli, Version: version, env: env}, nil
}

// Stop stops kcp.
func (e *Env) Stop() error {
	return e.env.Stop()
}

// AddUser returns a config (without a workspace) for a new user that
// authenticates with a client certificate, member of groups besides
// system:authenticated.
func (e *Env) AddUser(name string, groups ...string) (*rest.Config, error) {
	u, err := e.env.Kcp.AddUser(envtest.User{Name: name, Groups: groups}, e.Config)
	if err != nil {
		return nil, fmt.Errorf("failed to add user %s: %w", name, err)
	}
	return u.Config(), nil
}

// LoadManifests reads every YAML document of the *.yaml files in dir
// (relative to the repository root), sorted by file name. kustomization.yaml
// is skipped.
func LoadManifests(dir string) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(RepoRoot(), dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var objs []*unstructured.Unstructured
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		docs, err := ReadYAMLFile(f)
		if err != nil {
			return nil, err
		}
		objs = append(objs, docs...)
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("no manifests found in %s", dir)
	}
	return objs, nil
}

// ReadYAMLFile decodes every non-empty YAML document in a file.
func ReadYAMLFile(path string) ([]*unstructured.Unstructured, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", path, err)
	}
	return DecodeYAML(raw)
}

// DecodeYAML decodes every non-empty document of a multi-document YAML stream.
func DecodeYAML(raw []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("failed to decode YAML document: %w", err)
		}
		if len(obj) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
}

// Apply creates the objects, or updates them to the given content when they
// exist, through c.
func Apply(ctx context.Context, c client.Client, objs ...*unstructured.Unstructured) error {
	for _, obj := range objs {
		obj = obj.DeepCopy()
		err := c.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			existing := &unstructured.Unstructured{}
			existing.SetGroupVersionKind(obj.GroupVersionKind())
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
				return fmt.Errorf("failed to get %s %s: %w", obj.GetKind(), obj.GetName(), err)
			}
			obj.SetResourceVersion(existing.GetResourceVersion())
			err = c.Update(ctx, obj)
		}
		if err != nil {
			return fmt.Errorf("failed to apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// InstallDependencyAPI applies the generated APIResourceSchema and APIExport
// from config/kcp into the workspace of c.
func InstallDependencyAPI(ctx context.Context, c client.Client) error {
	objs, err := LoadManifests("config/kcp")
	if err != nil {
		return err
	}
	return Apply(ctx, c, objs...)
}

// BindAPIExport creates an APIBinding named like the export in the workspace
// of c that binds the APIExport exportName at exportPath and accepts every
// permission claim the export makes, then waits until the binding is Bound.
func BindAPIExport(ctx context.Context, c client.Client, exportClient client.Client, exportPath logicalcluster.Path, exportName string) (*apisv1alpha2.APIBinding, error) {
	export := &apisv1alpha2.APIExport{}
	if err := exportClient.Get(ctx, client.ObjectKey{Name: exportName}, export); err != nil {
		return nil, fmt.Errorf("failed to get APIExport %s in %s: %w", exportName, exportPath, err)
	}

	binding := &apisv1alpha2.APIBinding{
		ObjectMeta: metav1.ObjectMeta{Name: exportName},
		Spec: apisv1alpha2.APIBindingSpec{
			Reference: apisv1alpha2.BindingReference{
				Export: &apisv1alpha2.ExportBindingReference{Path: exportPath.String(), Name: exportName},
			},
		},
	}
	for _, claim := range export.Spec.PermissionClaims {
		binding.Spec.PermissionClaims = append(binding.Spec.PermissionClaims, apisv1alpha2.AcceptablePermissionClaim{
			ScopedPermissionClaim: apisv1alpha2.ScopedPermissionClaim{
				PermissionClaim: claim,
				Selector:        apisv1alpha2.PermissionClaimSelector{MatchAll: true},
			},
			State: apisv1alpha2.ClaimAccepted,
		})
	}
	if err := c.Create(ctx, binding); err != nil {
		return nil, fmt.Errorf("failed to create APIBinding %s: %w", exportName, err)
	}

	var lastPhase apisv1alpha2.APIBindingPhaseType
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(binding), binding); err != nil {
			return false, err
		}
		lastPhase = binding.Status.Phase
		return lastPhase == apisv1alpha2.APIBindingPhaseBound, nil
	})
	if err != nil {
		return nil, fmt.Errorf("APIBinding %s to %s:%s not bound (phase %q): %w", exportName, exportPath, exportName, lastPhase, err)
	}
	return binding, nil
}

// AcceptClaims updates the APIBinding named exportName in the workspace of
// c to accept every permission claim the export makes, as a provider does
// when an upgrade adds a claim (see docs/operations.md, "Upgrading and
// uninstalling").
func AcceptClaims(ctx context.Context, c client.Client, exportClient client.Client, exportName string) error {
	export := &apisv1alpha2.APIExport{}
	if err := exportClient.Get(ctx, client.ObjectKey{Name: exportName}, export); err != nil {
		return fmt.Errorf("failed to get APIExport %s: %w", exportName, err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		binding := &apisv1alpha2.APIBinding{}
		if err := c.Get(ctx, client.ObjectKey{Name: exportName}, binding); err != nil {
			return err
		}
		binding.Spec.PermissionClaims = nil
		for _, claim := range export.Spec.PermissionClaims {
			binding.Spec.PermissionClaims = append(binding.Spec.PermissionClaims, apisv1alpha2.AcceptablePermissionClaim{
				ScopedPermissionClaim: apisv1alpha2.ScopedPermissionClaim{PermissionClaim: claim, Selector: apisv1alpha2.PermissionClaimSelector{MatchAll: true}},
				State:                 apisv1alpha2.ClaimAccepted,
			})
		}
		return c.Update(ctx, binding)
	})
}
