// Package kcpversion reads the version of the kcp the binaries talk to and
// says whether this release was tested with it.
//
// The product relies on kcp behaviours that no kcp document promises
// together (the contract, checked by test/kcpcontract); a kcp outside the
// tested range may have changed one of them. The binaries do not refuse to
// run on such a kcp: they log a warning, expose the version as a metric and
// (the controller) report it in a condition of every rule.
package kcpversion

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Tested is the kcp release this release of the project is tested with
// (the pinned build of hack/tools/kcp). Its later patch releases are in the
// tested range too: they carry fixes, not changes of behaviour, and kcp's
// newest patch release is the recommended one.
const Tested = "v0.31.2"

// TestedRange describes the tested range for people.
var TestedRange = Tested + " and later " + minorOf(Tested) + " patch releases"

// Info is what the binaries know of kcp's version.
type Info struct {
	// GitVersion is what kcp's /version reports, e.g. v1.35.1+kcp-v0.31.2.
	GitVersion string
	// KCP is the kcp release in GitVersion, e.g. v0.31.2; empty when
	// GitVersion names none.
	KCP string
	// Tested is set when KCP is in the tested range.
	Tested bool
}

// Parse returns the Info of a gitVersion as kcp reports it: the Kubernetes
// version it is built on, then "+kcp-" and the kcp release.
func Parse(gitVersion string) Info {
	info := Info{GitVersion: gitVersion}
	_, kcp, found := strings.Cut(gitVersion, "+kcp-")
	if !found {
		return info
	}
	v, err := utilversion.ParseSemantic(kcp)
	if err != nil {
		return info
	}
	info.KCP = "v" + v.String()
	info.Tested = InRange(v)
	return info
}

// InRange reports whether v is in the tested range: Tested or a later patch
// release of its minor version. Pre-releases and builds of a tested version
// count as that version.
func InRange(v *utilversion.Version) bool {
	tested := utilversion.MustParseSemantic(Tested)
	return v.Major() == tested.Major() && v.Minor() == tested.Minor() && v.Patch() >= tested.Patch()
}

// Read asks kcp for its version (GET /version under cfg's host, whose
// workspace path is kept: kcp serves /version in every workspace), giving
// up after timeout.
func Read(cfg *rest.Config, timeout time.Duration) (Info, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = timeout
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return Info{}, fmt.Errorf("failed to create a discovery client: %w", err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return Info{}, fmt.Errorf("failed to read kcp's version: %w", err)
	}
	return Parse(v.GitVersion), nil
}

// Describe says in a sentence what Info means for the product.
func (i Info) Describe() string {
	switch {
	case i.KCP == "" && i.GitVersion == "":
		return "kcp's version could not be read"
	case i.KCP == "":
		return fmt.Sprintf("kcp reports the version %q, which names no kcp release; this release is tested with %s", i.GitVersion, TestedRange)
	case i.Tested:
		return fmt.Sprintf("kcp %s is in the tested range (%s)", i.KCP, TestedRange)
	}
	return fmt.Sprintf("kcp %s is outside the tested range (%s): a kcp behaviour the product relies on may have changed; run the contract suite against it (docs/operations.md, Compatibility)", i.KCP, TestedRange)
}

// readTimeout bounds Check's read of kcp's version.
const readTimeout = 10 * time.Second

// Check reads kcp's version at start and logs what it means: a warning
// (logged as an error without one) outside the tested range, and the error
// if the version cannot be read. It never fails: the binaries run on any
// kcp.
func Check(ctx context.Context, cfg *rest.Config) Info {
	logger := log.FromContext(ctx)
	info, err := Read(cfg, readTimeout)
	switch {
	case err != nil:
		logger.Error(err, "Cannot tell which kcp this is; running anyway", "tested", TestedRange)
	case !info.Tested:
		logger.Error(nil, "WARNING: untested kcp version: "+info.Describe(), "kcp", info.KCP, "gitVersion", info.GitVersion)
	default:
		logger.Info("Talking to kcp", "kcp", info.KCP, "gitVersion", info.GitVersion, "tested", TestedRange)
	}
	return info
}

// help is the help text of the version gauges.
const help = "The kcp release the binary talks to (version), and whether this release was tested with it (tested: true, false, or unknown when the version could not be read); always 1."

// ControllerMetric returns the controller's gauge
// dependency_controller_kcp_version_info (see withVersion).
func ControllerMetric(info Info) prometheus.Collector {
	return withVersion(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dependency_controller_kcp_version_info", Help: help}, []string{"version", "tested"}), info)
}

// WebhookMetric returns the webhook's gauge
// dependency_webhook_kcp_version_info (see withVersion).
func WebhookMetric(info Info) prometheus.Collector {
	return withVersion(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dependency_webhook_kcp_version_info", Help: help}, []string{"version", "tested"}), info)
}

// withVersion sets g to 1 for the version the binary found, with the
// labels version (the kcp release, "unknown" if none) and tested ("true",
// "false" or "unknown").
func withVersion(g *prometheus.GaugeVec, info Info) prometheus.Collector {
	version, tested := info.KCP, fmt.Sprint(info.Tested)
	if version == "" {
		version, tested = "unknown", "unknown"
	}
	g.WithLabelValues(version, tested).Set(1)
	return g
}

func minorOf(v string) string {
	parsed := utilversion.MustParseSemantic(v)
	return fmt.Sprintf("v%d.%d", parsed.Major(), parsed.Minor())
}
