//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	corev1alpha1 "github.com/kcp-dev/sdk/apis/core/v1alpha1"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"

	"github.com/opendefensecloud/dependency-controller/test/helmchart"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// shardRouter stands in for what routes kcp's calls to the webhook of the
// shard that makes them where shards run in separate clusters (the same
// Service name resolving to the local shard's webhook): it terminates TLS
// with the webhook's serving certificate, reads which logical cluster an
// AdmissionReview is about, and forwards it to the webhook of the shard
// that serves that cluster; misroute sends a cluster to another webhook.
type shardRouter struct {
	server *http.Server
	client *http.Client

	lock     sync.Mutex
	backends map[logicalcluster.Name]string // cluster -> host:port
	fallback string
	misroute map[logicalcluster.Name]string
}

func startShardRouter(addr, certDir string, ca []byte, fallback string, backends map[logicalcluster.Name]string) (*shardRouter, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	r := &shardRouter{
		client:   &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}},
		backends: backends, fallback: fallback, misroute: map[logicalcluster.Name]string{},
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r.server = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		_ = r.server.ServeTLS(l, filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	}()
	return r, nil
}

func (r *shardRouter) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review struct {
		Request struct {
			Object, OldObject struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			}
		} `json:"request"`
	}
	_ = json.Unmarshal(body, &review)
	cluster := logicalcluster.Name(review.Request.OldObject.Metadata.Annotations[logicalcluster.AnnotationKey])
	if cluster.Empty() {
		cluster = logicalcluster.Name(review.Request.Object.Metadata.Annotations[logicalcluster.AnnotationKey])
	}
	r.lock.Lock()
	backend, ok := r.misroute[cluster]
	if !ok {
		if backend, ok = r.backends[cluster]; !ok {
			backend = r.fallback
		}
	}
	r.lock.Unlock()
	out, err := http.NewRequestWithContext(req.Context(), req.Method, "https://"+backend+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = req.Header.Clone()
	resp, err := r.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (r *shardRouter) setMisroute(cluster logicalcluster.Name, backend string) {
	r.lock.Lock()
	defer r.lock.Unlock()
	if backend == "" {
		delete(r.misroute, cluster)
		return
	}
	r.misroute[cluster] = backend
}

// scrape returns the value of a series of the metrics at url.
func scrape(url, series string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0, fmt.Errorf("no %s at %s", series, url)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// flagValue returns the value of --name in args (the last one).
func flagValue(args []string, name string) string {
	v := ""
	for _, a := range args {
		if after, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			v = after
		}
	}
	return v
}

// shardScenarios run the webhook as the chart renders it with
// webhook.shards: one webhook per shard, each indexing only its shard's
// virtual workspaces, behind a router that sends each shard's calls to its
// own webhook. On one shard, the second webhook is for a shard that does
// not exist.
func shardScenarios() {
	It("runs a webhook per shard: each indexes only its shard's dependents, both decide correctly, and a misrouted request is refused", func(ctx context.Context) {
		shardList := &corev1alpha1.ShardList{}
		Expect(cli.Cluster(logicalcluster.NewPath("root")).List(ctx, shardList)).To(Succeed())
		vwURL := map[string]string{}
		for _, s := range shardList.Items {
			vwURL[s.Name] = s.Spec.VirtualWorkspaceURL
			if vwURL[s.Name] == "" {
				vwURL[s.Name] = s.Spec.BaseURL
			}
		}
		shardOf := func(ws logicalcluster.Path) (string, logicalcluster.Name) {
			parent, name := ws.Split()
			w := &tenancyv1alpha1.Workspace{}
			Expect(cli.Cluster(parent).Get(ctx, client.ObjectKey{Name: name}, w)).To(Succeed())
			return envtest.WorkspaceShardOrDie(GinkgoT(), cli, w).Name, logicalcluster.Name(w.Spec.Cluster)
		}
		shardA, clusterA := shardOf(consumerA)
		shardB, clusterB := shardOf(consumerB)
		second := shardB
		if shardA == shardB {
			second = "elsewhere"
			vwURL[second] = "https://127.0.0.1:1"
		}
		names := []string{shardA, second}

		By("rendering the chart with webhook.shards")
		var shards []any
		for _, n := range names {
			Expect(vwURL[n]).NotTo(BeEmpty(), "shard %s has no URL", n)
			shards = append(shards, map[string]any{"name": n, "url": vwURL[n]})
		}
		values := maps.Clone(webhookChartValues)
		webhookValues := maps.Clone(values["webhook"].(map[string]any))
		webhookValues["shards"] = shards
		values["webhook"] = webhookValues
		bins, err := helmchart.RenderBinaries(ctx, helmchart.Options{Values: values})
		Expect(err).NotTo(HaveOccurred())
		Expect(bins.ShardWebhooks).To(HaveLen(2))

		By("replacing the webhook by one per shard behind a router on its port")
		routerAddr := "127.0.0.1:" + flagValue(webhookProc.Args, "port")
		webhookProc.Stop()
		DeferCleanup(func() {
			Expect(webhookProc.Start()).To(Succeed())
			Eventually(webhookProc.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		})
		addrs, metrics := map[string]string{}, map[string]string{}
		for _, n := range names {
			addr, health, metricsAddr := freeAddr(), freeAddr(), freeAddr()
			_, port, _ := net.SplitHostPort(addr)
			p := &kcpenv.Process{
				Name: "webhook-" + n, Binary: webhookProc.Binary, LogPath: filepath.Join(artifacts, "webhook-"+n+".log"), HealthAddr: health,
				Args: append(localArgs(bins.ShardWebhooks[n], suiteSecrets),
					"--port="+port, "--health-probe-bind-address="+health, "--metrics-bind-address="+metricsAddr, "--leader-elect=false"),
			}
			Expect(p.Start()).To(Succeed())
			DeferCleanup(p.Stop)
			addrs[n], metrics[n] = addr, "http://"+metricsAddr+"/metrics"
			Eventually(p.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed(), "%s log:\n%s", p.Name, p.LogTail(40))
		}
		router, err := startShardRouter(routerAddr, filepath.Join(artifacts, "serving-cert"), suiteSecrets["webhook-serving-cert"]["ca.crt"], addrs[shardA],
			map[logicalcluster.Name]string{clusterA: addrs[shardA], clusterB: addrs[shardB]})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = router.server.Close() })

		By("deciding for consumers on both shards")
		for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
			create(ctx, ws, vpc("vpc-sharded"), vm("vm-sharded", "vpc-sharded"))
			expectDenied(ctx, ws, vpcs, "vpc-sharded", "VirtualMachine/default/vm-sharded")
		}

		By("indexing only the dependents of each webhook's shard")
		extra := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shard-memory"}}
		Expect(client.IgnoreAlreadyExists(cli.Cluster(consumerA).Create(ctx, extra))).To(Succeed())
		for i := range 300 {
			o := vm(fmt.Sprintf("vm-%03d", i), "vpc-none")
			o.SetNamespace(extra.Name)
			Expect(cli.Cluster(consumerA).Create(ctx, o)).To(Succeed())
		}
		countVMs := func(g Gomega, ws logicalcluster.Path) int {
			list := &unstructured.UnstructuredList{}
			list.SetAPIVersion(vms.GroupVersion().String())
			list.SetKind("VirtualMachineList")
			g.Expect(cli.Cluster(ws).List(ctx, list)).To(Succeed())
			return len(list.Items)
		}
		Eventually(func(g Gomega) {
			want := map[string]int{shardA: countVMs(g, consumerA), second: 0}
			if second == shardB {
				want[second] = countVMs(g, consumerB)
			} else {
				want[shardA] += countVMs(g, consumerB)
			}
			for _, n := range names {
				got, err := scrape(metrics[n], "dependency_webhook_indexed_dependents")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(BeNumerically("==", want[n]), "dependents indexed by the webhook of %s", n)
			}
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		for _, n := range names {
			indexed, _ := scrape(metrics[n], "dependency_webhook_indexed_dependents")
			rss, _ := scrape(metrics[n], "process_resident_memory_bytes")
			heap, _ := scrape(metrics[n], "go_memstats_heap_inuse_bytes")
			GinkgoWriter.Printf("webhook of shard %s: %.0f dependents indexed, RSS %.1f MiB, heap in use %.1f MiB\n", n, indexed, rss/(1<<20), heap/(1<<20))
		}

		By("refusing a request routed to the webhook of another shard, rather than allowing it")
		create(ctx, consumerB, vpc("vpc-misrouted"))
		router.setMisroute(clusterB, addrs[names[0]])
		if shardA == shardB {
			router.setMisroute(clusterB, addrs[second])
		}
		err = cli.Cluster(consumerB).Delete(ctx, vpc("vpc-misrouted"))
		Expect(err).To(HaveOccurred(), "a misrouted DELETE was allowed")
		Expect(err.Error()).To(And(ContainSubstring("does not answer for this workspace"), ContainSubstring("kcp must call the webhook of the shard that serves it")))
		var status apierrors.APIStatus
		Expect(errors.As(err, &status)).To(BeTrue())
		Expect(status.Status().Code).To(BeEquivalentTo(http.StatusMisdirectedRequest))
		router.setMisroute(clusterB, "")
		Expect(cli.Cluster(consumerB).Delete(ctx, vpc("vpc-misrouted"))).To(Succeed())

		By("allowing once the dependents are gone")
		for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
			Expect(remove(ctx, ws, vms, "vm-sharded")).To(Succeed())
			expectDeletable(ctx, ws, vpcs, "vpc-sharded")
		}
		Expect(cli.Cluster(consumerA).Delete(ctx, extra)).To(Succeed())
	})
}
