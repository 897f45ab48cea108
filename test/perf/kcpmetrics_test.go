//go:build perf

package perf

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
	"github.com/opendefensecloud/dependency-controller/test/procenv"
)

// kcpTimes are what kcp measured of itself (its /metrics), summed by what
// they are of: the time its admission waited for each webhook, by webhook
// and operation, and the time it took to serve requests, by verb and
// resource; with how many there were.
type kcpTimes struct {
	sum, count map[string]float64
}

// The series of kcp's metrics that kcpTimes sums: histograms whose _sum and
// _count are read.
const (
	kcpWebhookSeconds = "apiserver_admission_webhook_admission_duration_seconds"
	kcpRequestSeconds = "apiserver_request_duration_seconds"
)

var seriesLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// kcpMetrics reads kcp's metrics.
func (s *setup) kcpMetrics(ctx context.Context, t *testing.T) map[string]float64 {
	cfg := rest.CopyConfig(s.env.Config)
	cfg.APIPath = "/"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c, err := rest.UnversionedRESTClientFor(cfg)
	must(t, err)
	body, err := c.Get().AbsPath("/clusters/root/metrics").DoRaw(ctx)
	must(t, err)
	return procenv.ParseMetrics(string(body))
}

// kcpTimes reads kcp's metrics.
func (s *setup) kcpTimes(ctx context.Context, t *testing.T) kcpTimes {
	out := kcpTimes{sum: map[string]float64{}, count: map[string]float64{}}
	for series, v := range s.kcpMetrics(ctx, t) {
		name, labels, _ := strings.Cut(series, "{")
		l := map[string]string{}
		for _, m := range seriesLabel.FindAllStringSubmatch(labels, -1) {
			l[m[1]] = m[2]
		}
		var key string
		switch strings.TrimSuffix(strings.TrimSuffix(name, "_sum"), "_count") {
		case kcpWebhookSeconds:
			key = fmt.Sprintf("webhook %s %s", l["name"], l["operation"])
		case kcpRequestSeconds:
			if l["dry_run"] != "" {
				l["verb"] += " (dry run)"
			}
			key = fmt.Sprintf("%s %s", l["verb"], l["resource"])
		default:
			continue
		}
		switch {
		case strings.HasSuffix(name, "_sum"):
			out.sum[key] += v
		case strings.HasSuffix(name, "_count"):
			out.count[key] += v
		}
	}
	return out
}

// since describes what kcp measured since before, per unit of n (say, per
// CREATE measured): for each webhook call and each request for VPCs and
// VMs that occurred (everyone's: the webhook's writes through the virtual
// workspaces too), how many per unit and their mean time in milliseconds.
func (k kcpTimes) since(before kcpTimes, n int, unit string) string {
	return k.sinceOf(before, n, unit, vpcs.Resource, vms.Resource)
}

// sinceOf is since for the webhook calls and the requests for resources
// (every resource if none).
func (k kcpTimes) sinceOf(before kcpTimes, n int, unit string, resources ...string) string {
	var keys []string
	for key, c := range k.count {
		_, resource, _ := strings.Cut(key, " ")
		if c > before.count[key] && (strings.HasPrefix(key, "webhook ") || len(resources) == 0 || slices.Contains(resources, resource)) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	var parts []string
	for _, key := range keys {
		count := k.count[key] - before.count[key]
		parts = append(parts, fmt.Sprintf("%s: %.2f per %s, %.1f ms each", key, count/float64(n), unit, 1000*(k.sum[key]-before.sum[key])/count))
	}
	return strings.Join(parts, "; ")
}

// profileKCP, if kcp runs with its profiler (kcpenv.ProfilerAddressEnv)
// and MEASURE_KCP_PROFILE names a directory, has kcp profile its CPU for
// seconds from now and writes the profile there as <name>.pprof, for go
// tool pprof: where kcp's time goes during a measurement. The test waits
// for the profile before it completes.
func (s *setup) profileKCP(ctx context.Context, t *testing.T, name string, seconds int) {
	dir, addr := os.Getenv("MEASURE_KCP_PROFILE"), os.Getenv(kcpenv.ProfilerAddressEnv)
	if dir == "" || addr == "" {
		return
	}
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, seconds)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Logf("kcp's CPU profile: %v", err)
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Logf("kcp's CPU profile: %v", err)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+".pprof"), body, 0o644)
		}
		if err != nil {
			t.Logf("kcp's CPU profile: %v", err)
			return
		}
		t.Logf("kcp's CPU profile for %ds: %s", seconds, filepath.Join(dir, name+".pprof"))
	}()
}

// cpuTimes is the CPU time that kcp, the webhook and the controller have
// used so far, in seconds.
type cpuTimes struct {
	at                       time.Time
	kcp, webhook, controller float64
}

// cpuTimes reads the CPU time used by kcp (process_cpu_seconds_total of its
// metrics), the webhook and the controller (their /proc/<pid>/stat).
func (s *setup) cpuTimes(ctx context.Context, t *testing.T) cpuTimes {
	kcp, ok := s.kcpMetrics(ctx, t)["process_cpu_seconds_total"]
	if !ok {
		t.Fatal("no process_cpu_seconds_total in kcp's metrics")
	}
	webhook, err := procenv.CPU(s.webhook.Pid())
	must(t, err)
	controller, err := procenv.CPU(s.controller.Pid())
	must(t, err)
	return cpuTimes{at: time.Now(), kcp: kcp, webhook: webhook, controller: controller}
}

// since describes the CPU used since before, in cores (CPU seconds per
// second of wall time).
func (c cpuTimes) since(before cpuTimes) string {
	wall := c.at.Sub(before.at).Seconds()
	return fmt.Sprintf("kcp %.2f cores, the webhook %.2f, the controller %.2f (over %.1f s)",
		(c.kcp-before.kcp)/wall, (c.webhook-before.webhook)/wall, (c.controller-before.controller)/wall, wall)
}
