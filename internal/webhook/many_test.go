package webhook_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	"github.com/kcp-dev/sdk/apis/core"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/controllerserver"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/references"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
	"github.com/opendefensecloud/dependency-controller/internal/webhookserver"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// loadBalancerGVR is a dependent type with its references in a list:
// .spec.items[*].vpc names VPCs.
var loadBalancerGVR = schema.GroupVersionResource{Group: "compute.test.io", Version: "v1", Resource: "loadbalancers"}

// manyReferences is a network provider (VPCs), a compute provider whose
// LoadBalancers reference VPCs at .spec.items[*].vpc, a consumer of both,
// and the webhook and the controller running as deployed.
type manyReferences struct {
	network, compute, consumer logicalcluster.Path
	consumerCluster            logicalcluster.Name
	wh                         *kcpenv.Webhook
}

// startManyReferences sets up manyReferences with the webhook's defaults
// but for what configure changes, and kcp waiting timeoutSeconds for the
// webhook; it waits until the rule protects and its dependents are
// labelled, and stops everything when the container is done.
func startManyReferences(ctx context.Context, timeoutSeconds int32, configure func(*webhookserver.Options)) *manyReferences {
	GinkgoHelper()
	root := core.RootCluster.Path()
	depCtrl := newDepCtrlWorkspace(ctx, root)
	_, network := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("network"))
	Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(network), "network.test.io", kcpenv.Resource{Kind: "VPC", Plural: "vpcs"})).To(Succeed())
	_, compute := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("compute"))
	Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(compute), "compute.test.io", kcpenv.Resource{Kind: "LoadBalancer", Plural: "loadbalancers"})).To(Succeed())
	consent(ctx, network, depCtrl, "network-provider", false)
	consent(ctx, compute, depCtrl, "compute-provider", false)
	consumerWS, consumer := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("consumer"))
	bindExports(ctx, consumer, export{network, "network.test.io"}, export{compute, "compute.test.io"})
	Expect(cli.Cluster(compute).Create(ctx, &depv1alpha1.DependencyRule{
		ObjectMeta: metav1.ObjectMeta{Name: "lb-vpcs"},
		Spec: depv1alpha1.DependencyRuleSpec{
			Dependent:    depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "LoadBalancer", Resource: "loadbalancers"},
			Dependencies: []depv1alpha1.Dependency{{APIExportRef: depv1alpha1.APIExportReference{Path: network.String(), Name: "network.test.io"}, Group: "network.test.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: ".spec.items[*].vpc"}}},
		},
	})).To(Succeed())

	By("starting the webhook and the controller, as deployed")
	wh := startWebhook(ctx, depCtrl, nil, func(o *webhookserver.Options) {
		o.RequestTimeout = webhookserver.NewOptions().RequestTimeout
		if configure != nil {
			configure(o)
		}
	})
	stop := startController(ctx, depCtrl, wh, caBundleFile(wh), timeoutSeconds)
	DeferCleanup(func() { Expect(stop()).To(Succeed()) })
	expectCondition(ctx, compute, "lb-vpcs", depv1alpha1.ConditionReady, metav1.ConditionTrue, "Protecting")
	expectCondition(ctx, compute, "lb-vpcs", depv1alpha1.ConditionDependentsLabelled, metav1.ConditionTrue, depv1alpha1.ReasonLabelled)

	By("a first LoadBalancer to probe kcp's admission with: references are tracked")
	m := &manyReferences{network: network, compute: compute, consumer: consumer, consumerCluster: logicalcluster.Name(consumerWS.Spec.Cluster), wh: wh}
	m.createVPCs(ctx, 0, 1)
	create(ctx, consumer, m.loadBalancer("lb-probe", 0, 1))
	expectCondition(ctx, compute, "lb-vpcs", depv1alpha1.ConditionReferencesTracked, metav1.ConditionTrue, depv1alpha1.ReasonTracked)
	return m
}

// vpcName is the name of the i-th VPC.
func vpcName(i int) string {
	return fmt.Sprintf("vpc-%04d", i)
}

// createVPCs creates the VPCs from to to - 1 of the consumer, 16 at a time.
func (m *manyReferences) createVPCs(ctx context.Context, from, to int) {
	GinkgoHelper()
	var (
		lock sync.Mutex
		errs []error
		wg   sync.WaitGroup
		work = make(chan int)
	)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				err := cli.Cluster(m.consumer).Create(ctx, newObject(vpcGVR, "default", vpcName(i), nil))
				if err != nil && !apierrors.IsAlreadyExists(err) {
					lock.Lock()
					errs = append(errs, err)
					lock.Unlock()
				}
			}
		})
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	Expect(errs).To(BeEmpty())
}

// loadBalancer is a LoadBalancer named name with an item in each of the
// VPCs from to to - 1.
func (m *manyReferences) loadBalancer(name string, from, to int) *unstructured.Unstructured {
	items := make([]any, 0, to-from)
	for i := from; i < to; i++ {
		items = append(items, map[string]any{"vpc": vpcName(i)})
	}
	return newObject(loadBalancerGVR, "default", name, map[string]any{"items": items})
}

// timedCreate creates obj in the consumer once (with opts, e.g. a dry
// run), and returns how long kcp took to answer, the warnings and the
// error.
func (m *manyReferences) timedCreate(ctx context.Context, obj *unstructured.Unstructured, opts ...client.CreateOption) (time.Duration, []string, error) {
	GinkgoHelper()
	collected := &kcpenv.WarningCollector{}
	cfg := rest.CopyConfig(kcpConfig)
	cfg.Host += m.consumer.RequestPath()
	cfg.WarningHandlerWithContext = collected
	cfg.Timeout = time.Minute
	c, err := client.New(cfg, client.Options{})
	Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	err = c.Create(ctx, obj.DeepCopy(), opts...)
	return time.Since(start), collected.Warnings(), err
}

// createChecked creates obj in the consumer, again while kcp answers 503
// to retry (a kcp busy with other work may not record every reference in
// time), and returns how long the attempt that succeeded took, how many
// attempts it took, and its warnings.
func (m *manyReferences) createChecked(ctx context.Context, obj *unstructured.Unstructured) (time.Duration, int, []string) {
	GinkgoHelper()
	var (
		took     time.Duration
		warnings []string
		attempts int
	)
	Eventually(func(g Gomega) {
		attempts++
		var err error
		took, warnings, err = m.timedCreate(ctx, obj)
		if apierrors.IsServiceUnavailable(err) {
			GinkgoWriter.Printf("attempt %d refused after %s, to be retried: %v\n", attempts, took, err)
		}
		g.Expect(apierrors.IsServiceUnavailable(err)).To(BeFalse())
		Expect(err).NotTo(HaveOccurred())
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	return took, attempts, warnings
}

// expectMarked checks that the VPCs from to to - 1 each carry the mark of
// the admission of the LoadBalancer name in their ledger.
func (m *manyReferences) expectMarked(ctx context.Context, name string, from, to int) {
	GinkgoHelper()
	lb := newObject(loadBalancerGVR, "default", name, nil)
	Expect(cli.Cluster(m.consumer).Get(ctx, client.ObjectKeyFromObject(lb), lb)).To(Succeed())
	id := lb.GetLabels()[depv1alpha1.LabelAdmission]
	Expect(id).To(MatchRegexp("^[0-9a-f]{16}$"), "the LoadBalancer carries its admission id")
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(vpcGVR.GroupVersion().WithKind("VPCList"))
	Expect(cli.Cluster(m.consumer).List(ctx, list, client.InNamespace("default"))).To(Succeed())
	marked := 0
	for _, vpc := range list.Items {
		var i int
		if _, err := fmt.Sscanf(vpc.GetName(), "vpc-%04d", &i); err != nil || i < from || i >= to {
			continue
		}
		Expect(vpc.GetAnnotations()[depv1alpha1.AnnotationAdmittedReferences]).To(ContainSubstring(id+"@"), "the ledger of %s", vpc.GetName())
		marked++
	}
	Expect(marked).To(Equal(to-from), "VPCs whose ledger carries the mark")
}

// The check of new references of a dependent that references many objects:
// read and recorded in parallel (the targets of one namespace read with one
// LIST) within kcp's timeout for the webhook, up to the limit of references
// per object; past it, refused at once. Run with the defaults: kcp waits
// 5 s, the webhook answers within 4 s, and one object may reference 256.
var _ = Describe("Many references in one object", Ordered, func() {
	const limit = references.DefaultMaxReferences
	var m *manyReferences

	BeforeAll(func(ctx context.Context) {
		m = startManyReferences(ctx, controllerserver.NewOptions().WebhookTimeoutSeconds, nil)
		m.createVPCs(ctx, 0, limit+1)
	})

	It("checks and records a dependent with as many references as the limit within the webhook's timeout: admitted, with a warning, every VPC's ledger carries its mark, and the VPCs are protected by it", func(ctx context.Context) {
		// A dry run records nothing: it times the check of new references.
		took, _, err := m.timedCreate(ctx, m.loadBalancer("lb-max", 0, limit), client.DryRunAll)
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry(fmt.Sprintf("dry-run CREATE with %d new references, default timeout", limit), took.String())
		GinkgoWriter.Printf("dry-run CREATE of a LoadBalancer with %d new references (checked, not recorded): %s\n", limit, took)

		took, attempts, warnings := m.createChecked(ctx, m.loadBalancer("lb-max", 0, limit))
		AddReportEntry(fmt.Sprintf("CREATE with %d new references, default timeout", limit), fmt.Sprintf("%s (attempt %d)", took, attempts))
		GinkgoWriter.Printf("CREATE of a LoadBalancer with %d new references: %s (attempt %d)\n", limit, took, attempts)
		Expect(took).To(BeNumerically("<", time.Duration(controllerserver.NewOptions().WebhookTimeoutSeconds)*time.Second))
		Expect(warnings).To(ContainElement(ContainSubstring(fmt.Sprintf(`LoadBalancer "lb-max" references %d objects; one object may reference at most %d`, limit, limit))))
		m.expectMarked(ctx, "lb-max", 0, limit)
		recorded, err := m.wh.Counter("dependency_webhook_references_recorded_total", map[string]string{"result": "recorded"})
		Expect(err).NotTo(HaveOccurred())
		Expect(recorded).To(BeNumerically(">=", limit))

		By("a second one, on VPCs whose ledgers the webhook wrote a moment before")
		took, attempts, _ = m.createChecked(ctx, m.loadBalancer("lb-max-again", 0, limit))
		AddReportEntry(fmt.Sprintf("CREATE with %d new references, ledgers known", limit), fmt.Sprintf("%s (attempt %d)", took, attempts))
		GinkgoWriter.Printf("again, the ledgers known: %s (attempt %d)\n", took, attempts)
		m.expectMarked(ctx, "lb-max-again", 0, limit)

		By("a VPC it references is protected by it")
		expectDenied(ctx, m.consumer, vpcGVR, "default", vpcName(limit/2), "LoadBalancer/default/lb-max")
	})

	It("refuses a dependent one past the limit at once, naming the limit and the number, and one with 3,000 alike", func(ctx context.Context) {
		for _, n := range []int{limit + 1, 3000} {
			name := fmt.Sprintf("lb-%d", n)
			took, _, err := m.timedCreate(ctx, m.loadBalancer(name, 0, n))
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a 403, not a 503 to retry: %v", err)
			Expect(err.Error()).To(ContainSubstring(fmt.Sprintf(`LoadBalancer %q would reference %d objects; one object may reference at most %d`, name, n, limit)))
			Expect(err.Error()).NotTo(ContainSubstring("retry"))
			AddReportEntry(fmt.Sprintf("CREATE with %d references, refused", n), took.String())
			GinkgoWriter.Printf("CREATE with %d references refused after %s\n", n, took)
			Expect(took).To(BeNumerically("<", time.Second), "refused at once")
		}
		By("an UPDATE that adds one reference past the limit is refused too; one that removes references goes through")
		lb := newObject(loadBalancerGVR, "default", "lb-max", nil)
		Expect(cli.Cluster(m.consumer).Get(ctx, client.ObjectKeyFromObject(lb), lb)).To(Succeed())
		items, _, err := unstructured.NestedSlice(lb.Object, "spec", "items")
		Expect(err).NotTo(HaveOccurred())
		Expect(unstructured.SetNestedSlice(lb.Object, append(items, map[string]any{"vpc": vpcName(limit)}), "spec", "items")).To(Succeed())
		err = cli.Cluster(m.consumer).Update(ctx, lb.DeepCopy())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("would reference %d objects", limit+1)))
		Expect(unstructured.SetNestedSlice(lb.Object, items[:10], "spec", "items")).To(Succeed())
		Expect(cli.Cluster(m.consumer).Update(ctx, lb)).To(Succeed())
	})

	It("spares the check of new references the CREATEs whose references the labelling webhook recorded, checks the others, and refuses a reference to a VPC being deleted", func(ctx context.Context) {
		By("the check of new references gets the condition once the rule tracks references")
		Eventually(func(g Gomega) {
			cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			g.Expect(cli.Cluster(m.compute).Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, cfg)).To(Succeed())
			g.Expect(cfg.Webhooks).To(ContainElement(And(HaveField("Name", webhookconfig.ReferencesWebhookName),
				HaveField("MatchConditions", ContainElement(HaveField("Name", webhookconfig.NotRecordedConditionName))))))
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		checks := func() float64 {
			GinkgoHelper()
			sum := 0.0
			for _, outcome := range []string{"allowed", "denied", "error"} {
				n, err := m.wh.Counter("dependency_webhook_reference_checks_total", map[string]string{"outcome": outcome})
				Expect(err).NotTo(HaveOccurred())
				sum += n
			}
			return sum
		}

		By("a CREATE whose reference is recorded is not checked again (once kcp's admission has the condition)")
		i := 0
		Eventually(func(g Gomega) {
			before := checks()
			i++
			name := fmt.Sprintf("lb-recorded-%d", i)
			g.Expect(cli.Cluster(m.consumer).Create(ctx, m.loadBalancer(name, 0, 2))).To(Succeed())
			m.expectMarked(ctx, name, 0, 2)
			g.Expect(checks()).To(Equal(before), "the check of new references was called for %s", name)
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())

		By("a CREATE that records nothing (its VPC does not exist) is checked, and warned about")
		before := checks()
		_, warnings, err := m.timedCreate(ctx, newObject(loadBalancerGVR, "default", "lb-missing", map[string]any{"items": []any{map[string]any{"vpc": "vpc-missing"}}}))
		Expect(err).NotTo(HaveOccurred())
		Expect(warnings).To(ContainElement(ContainSubstring(`references vpcs "vpc-missing", which does not exist`)))
		Expect(checks()).To(Equal(before + 1))

		By("an admission id a user sets on a CREATE that records nothing is removed: it is checked")
		before = checks()
		forged := newObject(loadBalancerGVR, "default", "lb-forged", map[string]any{"items": []any{map[string]any{"vpc": "vpc-missing"}}})
		forged.SetLabels(map[string]string{depv1alpha1.LabelAdmission: "0123456789abcdef0123456789abcdef"})
		Expect(cli.Cluster(m.consumer).Create(ctx, forged)).To(Succeed())
		Expect(forged.GetLabels()).NotTo(HaveKey(depv1alpha1.LabelAdmission))
		Expect(checks()).To(Equal(before + 1))

		By("a dry run records nothing: it is checked")
		before = checks()
		_, _, err = m.timedCreate(ctx, m.loadBalancer("lb-dry", 0, 2), client.DryRunAll)
		Expect(err).NotTo(HaveOccurred())
		Expect(checks()).To(Equal(before + 1))

		By("a reference to a VPC being deleted is refused by the labelling webhook, as the check would")
		doomed := newObject(vpcGVR, "default", "vpc-doomed", nil)
		doomed.SetFinalizers([]string{"test.io/hold"})
		Expect(cli.Cluster(m.consumer).Create(ctx, doomed)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(cli.Cluster(m.consumer).Patch(ctx, newObject(vpcGVR, "default", "vpc-doomed", nil), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))).To(Succeed())
		})
		Expect(cli.Cluster(m.consumer).Delete(ctx, newObject(vpcGVR, "default", "vpc-doomed", nil))).To(Succeed())
		err = cli.Cluster(m.consumer).Create(ctx, newObject(loadBalancerGVR, "default", "lb-late", map[string]any{"items": []any{map[string]any{"vpc": "vpc-doomed"}, map[string]any{"vpc": vpcName(0)}}}))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(`LoadBalancer "lb-late" cannot reference vpcs "vpc-doomed": it is being deleted`))
	})

	It("says on the rule which dependent comes close to the limit, and keeps the type labelled and its references tracked", func(ctx context.Context) {
		expectCondition(ctx, m.compute, "lb-vpcs", depv1alpha1.ConditionDependentsLabelled, metav1.ConditionTrue, depv1alpha1.ReasonLabelled)
		expectCondition(ctx, m.compute, "lb-vpcs", depv1alpha1.ConditionReferencesTracked, metav1.ConditionTrue, depv1alpha1.ReasonTracked)
		// The webhook reads the largest dependent once a minute.
		Eventually(func(g Gomega) {
			rule := &depv1alpha1.DependencyRule{}
			g.Expect(cli.Cluster(m.compute).Get(ctx, client.ObjectKey{Name: "lb-vpcs"}, rule)).To(Succeed())
			c := meta.FindStatusCondition(rule.Status.Conditions, depv1alpha1.ConditionDependentsIndexed)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(And(ContainSubstring("LoadBalancer default/lb-max-again"),
				ContainSubstring(fmt.Sprintf("references %d objects, close to the limit of %d per object", limit, limit))))
		}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	})
})

// The same with the limit raised, and kcp's timeout for the webhook as long
// as kcp allows (30 s), to measure what 1,000 and 3,000 references of one
// object cost; a dependent with more references than it gets labels for
// (reflabels.MaxReferences) holds up neither the labelling of its type
// nor the tracking of references.
var _ = Describe("Many references in one object, the limit and the timeout raised", Ordered, func() {
	var m *manyReferences

	BeforeAll(func(ctx context.Context) {
		m = startManyReferences(ctx, 30, func(o *webhookserver.Options) {
			o.RequestTimeout = 24 * time.Second
			o.MaxReferencesPerObject = 3000
		})
		m.createVPCs(ctx, 0, 4000)
	})

	It("checks and records a dependent with 1,000 references within the timeout, keeps its type labelled and tracked, and says how long it took", func(ctx context.Context) {
		took, _, err := m.timedCreate(ctx, m.loadBalancer("lb-1000", 0, 1000), client.DryRunAll)
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("dry-run CREATE with 1,000 new references, 30 s timeout", took.String())
		GinkgoWriter.Printf("dry-run CREATE of a LoadBalancer with 1000 new references (checked, not recorded): %s\n", took)
		took, attempts, _ := m.createChecked(ctx, m.loadBalancer("lb-1000", 0, 1000))
		AddReportEntry("CREATE with 1,000 new references, 30 s timeout", fmt.Sprintf("%s (attempt %d)", took, attempts))
		GinkgoWriter.Printf("CREATE of a LoadBalancer with 1000 new references: %s (attempt %d)\n", took, attempts)
		m.expectMarked(ctx, "lb-1000", 0, 1000)
		lb := newObject(loadBalancerGVR, "default", "lb-1000", nil)
		Expect(cli.Cluster(m.consumer).Get(ctx, client.ObjectKeyFromObject(lb), lb)).To(Succeed())
		Expect(lb.GetLabels()).To(HaveKeyWithValue(depv1alpha1.LabelReferencesScheme, HaveSuffix("-many")), "no reference labels, and the scheme label that says so")
		expectDenied(ctx, m.consumer, vpcGVR, "default", vpcName(500), "LoadBalancer/default/lb-1000")
		Consistently(func(g Gomega) {
			rule := &depv1alpha1.DependencyRule{}
			g.Expect(cli.Cluster(m.compute).Get(ctx, client.ObjectKey{Name: "lb-vpcs"}, rule)).To(Succeed())
			for _, t := range []string{depv1alpha1.ConditionDependentsLabelled, depv1alpha1.ConditionReferencesTracked} {
				c := meta.FindStatusCondition(rule.Status.Conditions, t)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s: %s", t, c.Message)
			}
		}).WithTimeout(10 * time.Second).WithPolling(time.Second).Should(Succeed())
	})

	It("checks and records a dependent with 3,000 references within the timeout, or refuses it to be retried, never stored without its marks; and says how long it took", func(ctx context.Context) {
		took, _, err := m.timedCreate(ctx, m.loadBalancer("lb-3000", 1000, 4000), client.DryRunAll)
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("dry-run CREATE with 3,000 new references, 30 s timeout", took.String())
		GinkgoWriter.Printf("dry-run CREATE of a LoadBalancer with 3000 new references (checked, not recorded): %s\n", took)
		took, _, err = m.timedCreate(ctx, m.loadBalancer("lb-3000", 1000, 4000))
		AddReportEntry("CREATE with 3,000 new references, 30 s timeout", fmt.Sprintf("%s (%v)", took, err))
		GinkgoWriter.Printf("CREATE of a LoadBalancer with 3000 new references: %s (%v)\n", took, err)
		if err != nil {
			Expect(apierrors.IsServiceUnavailable(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring("retry"))
			Expect(apierrors.IsNotFound(cli.Cluster(m.consumer).Get(ctx, client.ObjectKeyFromObject(m.loadBalancer("lb-3000", 0, 0)), m.loadBalancer("lb-3000", 0, 0)))).To(BeTrue())
			return
		}
		m.expectMarked(ctx, "lb-3000", 1000, 4000)
	})
})
