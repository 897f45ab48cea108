package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	"github.com/kcp-dev/sdk/apis/core"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	depac "github.com/opendefensecloud/dependency-controller/api/v1alpha1/applyconfiguration/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/command"
	"github.com/opendefensecloud/dependency-controller/internal/conditions"
	"github.com/opendefensecloud/dependency-controller/internal/controller"
	"github.com/opendefensecloud/dependency-controller/internal/controllerserver"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	rulestatus "github.com/opendefensecloud/dependency-controller/internal/status"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

const (
	timeout  = 60 * time.Second
	interval = 200 * time.Millisecond
)

// webhookURL is the webhook URL the controller configures by default.
const webhookURL = "https://127.0.0.1:9443/validate"

// controllerOptions are the options of the controller in the tests, with
// the webhook's CA bundle in caFile.
func controllerOptions(caFile string) controllerserver.Options {
	return controllerserver.Options{
		CommonOptions:         command.CommonOptions{APIExportName: kcpenv.DepCtrlExportName, ResyncPeriod: time.Hour},
		WebhookURL:            webhookURL,
		WebhookCABundleFile:   caFile,
		CABundleCheckInterval: 100 * time.Millisecond,
		WebhookTimeoutSeconds: 4,
		FailurePolicy:         admissionregistrationv1.Fail,
	}
}

// writeCA writes the certificate of a new CA to path and returns it.
func writeCA(path string) []byte {
	GinkgoHelper()
	ca, err := kcpenv.NewCA("webhook-ca")
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(path, ca.PEM, 0o600)).To(Succeed())
	return ca.PEM
}

// startController runs the controller as cmd/controller does, assembled by
// internal/controllerserver, against the dep-ctrl workspace until the
// returned function is called.
func startController(depCtrl logicalcluster.Path, opts controllerserver.Options) (stop func()) {
	GinkgoHelper()
	cfg := rest.CopyConfig(kcpConfig)
	cfg.Host += depCtrl.RequestPath()
	c, err := controllerserver.New(context.Background(), cfg, opts, kcpenv.TestManagerOptions())
	Expect(err).NotTo(HaveOccurred())
	stopManager := kcpenv.RunInBackground(c.Manager.Start)
	return func() { Expect(stopManager()).To(Succeed()) }
}

// workspace creates a workspace under parent; if bind is set it binds the
// project's APIExport from depCtrl, accepting its permission claims.
func workspace(ctx context.Context, parent logicalcluster.Path, prefix string, depCtrl *logicalcluster.Path) logicalcluster.Path {
	_, path := envtest.NewWorkspaceFixture(GinkgoT(), cli, parent, envtest.WithNamePrefix(prefix))
	if depCtrl != nil {
		_, err := kcpenv.BindAPIExport(ctx, cli.Cluster(path), cli.Cluster(*depCtrl), *depCtrl, kcpenv.DepCtrlExportName)
		Expect(err).NotTo(HaveOccurred())
	}
	return path
}

type dependency struct {
	path     logicalcluster.Path
	group    string
	resource string
	field    string
}

func newRule(name, dependentResource string, deps ...dependency) *depv1alpha1.DependencyRule {
	rule := &depv1alpha1.DependencyRule{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: depv1alpha1.DependencyRuleSpec{
			Dependent: depv1alpha1.DependentResource{
				APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1",
				Kind: "Thing", Resource: dependentResource,
			},
		},
	}
	for _, d := range deps {
		rule.Spec.Dependencies = append(rule.Spec.Dependencies, depv1alpha1.Dependency{
			APIExportRef: depv1alpha1.APIExportReference{Path: d.path.String(), Name: d.group},
			Group:        d.group, Version: "v1", Resource: d.resource,
			FieldRef: depv1alpha1.FieldReference{Path: d.field},
		})
	}
	return rule
}

func getConfig(ctx context.Context, ws logicalcluster.Path) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	err := cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, cfg)
	return cfg, err
}

func getMutating(ctx context.Context, ws logicalcluster.Path) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	err := cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, cfg)
	return cfg, err
}

// protectedResources returns "group/version/resource" for each rule of the
// configuration in ws, or an error if it does not exist.
func protectedResources(ctx context.Context, ws logicalcluster.Path) ([]string, error) {
	cfg, err := getConfig(ctx, ws)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, wh := range cfg.Webhooks {
		if wh.Name == webhookconfig.RecordsWebhookName {
			continue // goes with the DELETE webhook; see "guards the records"
		}
		for _, r := range wh.Rules {
			out = append(out, fmt.Sprintf("%s/%s/%s %v", strings.Join(r.APIGroups, ","), strings.Join(r.APIVersions, ","), strings.Join(r.Resources, ","), r.Operations))
		}
	}
	return out, nil
}

func expectProtects(ctx context.Context, ws logicalcluster.Path, resources ...string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		got, err := protectedResources(ctx, ws)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(resources))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed(), "webhook configuration in %s", ws)
}

func expectNoConfig(ctx context.Context, ws logicalcluster.Path) {
	GinkgoHelper()
	Eventually(func() bool {
		_, err := getConfig(ctx, ws)
		return apierrors.IsNotFound(err)
	}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue(), "webhook configuration in %s should be removed", ws)
}

func expectCondition(ctx context.Context, ws logicalcluster.Path, name, condType string, status metav1.ConditionStatus, messageParts ...string) *depv1alpha1.DependencyRule {
	GinkgoHelper()
	rule := &depv1alpha1.DependencyRule{}
	Eventually(func(g Gomega) {
		g.Expect(cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: name}, rule)).To(Succeed())
		g.Expect(rule.Status.ObservedGeneration).To(Equal(rule.Generation))
		c := meta.FindStatusCondition(rule.Status.Conditions, condType)
		g.Expect(c).NotTo(BeNil(), "condition %s", condType)
		g.Expect(c.Status).To(Equal(status), "condition %s: %s", condType, c.Message)
		for _, part := range messageParts {
			g.Expect(c.Message).To(ContainSubstring(part))
		}
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	return rule
}

var _ = Describe("DependencyRule controller", Ordered, func() {
	var (
		depCtrl, compute, network, nested, storage logicalcluster.Path
		stop                                       func()
		// caFile holds the webhook's CA bundle, ca.
		caFile string
		ca     []byte
	)

	BeforeAll(func(ctx context.Context) {
		depCtrl = workspace(ctx, core.RootCluster.Path(), "dep-ctrl", nil)
		Expect(kcpenv.InstallDependencyAPI(ctx, cli.Cluster(depCtrl))).To(Succeed())

		compute = workspace(ctx, core.RootCluster.Path(), "compute", &depCtrl)
		network = workspace(ctx, core.RootCluster.Path(), "network", &depCtrl)
		storage = workspace(ctx, core.RootCluster.Path(), "storage", &depCtrl)
		org := workspace(ctx, core.RootCluster.Path(), "org", nil)
		team := workspace(ctx, org, "team", nil)
		nested = workspace(ctx, team, "network", &depCtrl)

		caFile = filepath.Join(GinkgoT().TempDir(), "ca.crt")
		ca = writeCA(caFile)
		stop = startController(depCtrl, controllerOptions(caFile))
		DeferCleanup(func() { stop() })
	})

	It("installs a configuration with exactly the protected resources and reports Ready", func(ctx context.Context) {
		rule := newRule("vm-to-vpc", "virtualmachines", dependency{network, "network.test.io", "vpcs", ".spec.vpcRef.name"})
		Expect(cli.Cluster(compute).Create(ctx, rule)).To(Succeed())

		expectProtects(ctx, network, "network.test.io/v1/vpcs [DELETE]")
		cfg, err := getConfig(ctx, network)
		Expect(err).NotTo(HaveOccurred())
		Expect(cfg.Labels).To(HaveKeyWithValue(webhookconfig.ManagedByLabel, webhookconfig.ManagedByValue))
		Expect(cfg.Webhooks).To(HaveLen(2), "the deletion webhook and the guard of deferred deletions' records")
		wh := cfg.Webhooks[0]
		Expect(wh.Name).To(Equal("deletion.dependencies.opendefense.cloud"))
		guard := cfg.Webhooks[1]
		Expect(guard.Name).To(Equal(webhookconfig.RecordsWebhookName))
		Expect(guard.FailurePolicy).To(Equal(ptr.To(admissionregistrationv1.Fail)), "records are guarded while the webhook is down")
		Expect(guard.MatchConditions).To(HaveLen(1), "kcp calls the guard only for writes that set or change a record")
		Expect(*wh.ClientConfig.URL).To(HavePrefix(webhookURL+"/"), "the URL names the provider workspace")
		Expect(wh.ClientConfig.CABundle).To(Equal(ca))
		Expect(wh.TimeoutSeconds).To(Equal(ptr.To[int32](4)))
		Expect(wh.FailurePolicy).To(Equal(ptr.To(admissionregistrationv1.Fail)))
		Expect(wh.SideEffects).To(Equal(ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun)), "a deferred deletion is recorded, except in a dry run")
		Expect(wh.AdmissionReviewVersions).To(Equal([]string{"v1"}))

		By("checking new references of VirtualMachines in the rule's own workspace, which serves them")
		expectProtects(ctx, compute, "compute.test.io/v1/virtualmachines [CREATE UPDATE]")

		got := expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionReady, metav1.ConditionTrue, network.String())
		Expect(got.Status.DependencyCount).To(BeEquivalentTo(1))
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionTargetsResolved, metav1.ConditionTrue, network.String())
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionWebhooksInstalled, metav1.ConditionTrue, network.String())
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionDependencyCycle, metav1.ConditionFalse)

		By("reporting the kcp version the controller read at start, as the kcp binary reports it")
		Expect(kcpVersion.KCP).NotTo(BeEmpty(), "the kcp binary reports no kcp release: %q", kcpVersion.GitVersion)
		kcpStatus, kcpReason := metav1.ConditionTrue, depv1alpha1.ReasonTestedVersion
		if !kcpVersion.Tested {
			kcpStatus, kcpReason = metav1.ConditionFalse, depv1alpha1.ReasonUntestedVersion
		}
		tested := expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionKCPVersionTested, kcpStatus, "kcp "+kcpVersion.KCP)
		Expect(meta.FindStatusCondition(tested.Status.Conditions, depv1alpha1.ConditionKCPVersionTested).Reason).To(Equal(kcpReason))

		By("not rewriting an unchanged configuration")
		// Read after Ready: the reconcile that reported it has finished
		// its writes.
		cfg, err = getConfig(ctx, network)
		Expect(err).NotTo(HaveOccurred())
		Consistently(func() string {
			c, _ := getConfig(ctx, network)
			return c.ResourceVersion
		}).WithTimeout(2 * time.Second).Should(Equal(cfg.ResourceVersion))
	})

	It("installs into a provider workspace at a nested path", func(ctx context.Context) {
		Expect(strings.Count(nested.String(), ":")).To(Equal(3), "root:org:team:network")
		rule := newRule("vm-to-volume", "virtualmachines", dependency{nested, "storage.test.io", "volumes", ".spec.volumeRef.name"})
		Expect(cli.Cluster(compute).Create(ctx, rule)).To(Succeed())

		expectProtects(ctx, nested, "storage.test.io/v1/volumes [DELETE]")
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionReady, metav1.ConditionTrue, nested.String())
	})

	It("merges two rules protecting one provider into one configuration", func(ctx context.Context) {
		rule := newRule("db-to-subnet", "databases", dependency{network, "network.test.io", "subnets", ".spec.subnet"})
		Expect(cli.Cluster(compute).Create(ctx, rule)).To(Succeed())

		expectProtects(ctx, network, "network.test.io/v1/subnets [DELETE]", "network.test.io/v1/vpcs [DELETE]")
		list := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
		Expect(cli.Cluster(network).List(ctx, list)).To(Succeed())
		Expect(list.Items).To(HaveLen(1))
	})

	It("follows in-place edits and removes stale entries", func(ctx context.Context) {
		rule := updateRule(ctx, compute, "db-to-subnet", func(rule *depv1alpha1.DependencyRule) {
			rule.Spec.Dependencies[0].Resource = "routers"
			rule.Spec.Dependencies = append(rule.Spec.Dependencies, depv1alpha1.Dependency{
				APIExportRef: depv1alpha1.APIExportReference{Path: storage.String(), Name: "storage.test.io"},
				Group:        "storage.test.io", Version: "v1", Resource: "buckets",
				FieldRef: depv1alpha1.FieldReference{Path: ".spec.buckets[*]"},
			})
		})

		expectProtects(ctx, network, "network.test.io/v1/routers [DELETE]", "network.test.io/v1/vpcs [DELETE]")
		expectProtects(ctx, storage, "storage.test.io/v1/buckets [DELETE]")
		got := expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionReady, metav1.ConditionTrue, network.String(), storage.String())
		Expect(got.Status.DependencyCount).To(BeEquivalentTo(2))

		By("dropping the storage dependency again")
		updateRule(ctx, compute, "db-to-subnet", func(rule *depv1alpha1.DependencyRule) {
			rule.Spec.Dependencies = rule.Spec.Dependencies[:1]
		})
		expectNoConfig(ctx, storage)
	})

	It("removes an entry when its rule is deleted, and the configuration when it is empty", func(ctx context.Context) {
		Expect(cli.Cluster(compute).Delete(ctx, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "db-to-subnet"}})).To(Succeed())
		expectProtects(ctx, network, "network.test.io/v1/vpcs [DELETE]")

		Expect(cli.Cluster(compute).Delete(ctx, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "vm-to-vpc"}})).To(Succeed())
		expectNoConfig(ctx, network)
		expectProtects(ctx, nested, "storage.test.io/v1/volumes [DELETE]")
	})

	It("restores a configuration that someone else changed or deleted", func(ctx context.Context) {
		cfg, err := getConfig(ctx, nested)
		Expect(err).NotTo(HaveOccurred())
		cfg.Webhooks[0].Rules[0].Resources = []string{"snapshots"}
		Expect(cli.Cluster(nested).Update(ctx, cfg)).To(Succeed())
		expectProtects(ctx, nested, "storage.test.io/v1/volumes [DELETE]")

		Expect(cli.Cluster(nested).Delete(ctx, cfg)).To(Succeed())
		expectProtects(ctx, nested, "storage.test.io/v1/volumes [DELETE]")
	})

	It("keeps what others add to a configuration, and takes back what it owns", func(ctx context.Context) {
		cfg, err := getConfig(ctx, nested)
		Expect(err).NotTo(HaveOccurred())
		cfg.Labels["team"] = "storage"
		cfg.Annotations["example.com/note"] = "added by hand"
		cfg.Webhooks[0].Rules[0].Resources = []string{"snapshots"}
		Expect(cli.Cluster(nested).Update(ctx, cfg, client.FieldOwner("kubectl-edit"))).To(Succeed())

		expectProtects(ctx, nested, "storage.test.io/v1/volumes [DELETE]")
		Consistently(func(g Gomega) {
			got, err := getConfig(ctx, nested)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Labels).To(HaveKeyWithValue("team", "storage"))
			g.Expect(got.Labels).To(HaveKeyWithValue(webhookconfig.ManagedByLabel, webhookconfig.ManagedByValue))
			g.Expect(got.Annotations).To(HaveKeyWithValue("example.com/note", "added by hand"))
			g.Expect(got.Webhooks[0].Rules[0].Resources).To(Equal([]string{"volumes"}))
		}).WithTimeout(2*time.Second).WithPolling(interval).Should(Succeed(), "the controller keeps the label and annotation someone else added")
	})

	It("keeps the conditions the webhook applies, and follows them in Ready", func(ctx context.Context) {
		rule := newRule("indexed", "virtualmachines", dependency{network, "network.test.io", "vpcs", ".spec.vpcRef.name"})
		Expect(cli.Cluster(compute).Create(ctx, rule)).To(Succeed())
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionReady, metav1.ConditionTrue)

		// The webhook applies its conditions under its own field manager.
		applyWebhookCondition := func(status metav1.ConditionStatus, reason, message string) {
			GinkgoHelper()
			got := &depv1alpha1.DependencyRule{}
			Expect(cli.Cluster(compute).Get(ctx, client.ObjectKey{Name: rule.Name}, got)).To(Succeed())
			ac := rulestatus.Apply(rule.Name, got.UID, depac.DependencyRuleStatus(), metav1.Condition{
				Type: depv1alpha1.ConditionDependentsIndexed, Status: status, Reason: reason, Message: message,
				ObservedGeneration: got.Generation, LastTransitionTime: metav1.Now(),
			})
			Expect(cli.Cluster(compute).Status().Apply(ctx, ac, client.FieldOwner(conditions.FieldOwner), client.ForceOwnership)).To(Succeed())
		}
		applyWebhookCondition(metav1.ConditionFalse, depv1alpha1.ReasonAccessDenied, "grant the webhook access")
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionReady, metav1.ConditionFalse, "grant the webhook access")

		By("changing the spec, so that the controller applies all of its conditions again")
		updateRule(ctx, compute, rule.Name, func(r *depv1alpha1.DependencyRule) {
			r.Spec.Dependencies[0].FieldRef.Path = ".spec.vpc"
		})
		got := expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionReady, metav1.ConditionFalse, "grant the webhook access")
		indexed := meta.FindStatusCondition(got.Status.Conditions, depv1alpha1.ConditionDependentsIndexed)
		Expect(indexed).NotTo(BeNil(), "the controller's apply removed the webhook's condition")
		Expect(indexed.Message).To(Equal("grant the webhook access"))
		for _, mf := range got.ManagedFields {
			if mf.Manager == controller.FieldOwner {
				Expect(string(mf.FieldsV1.Raw)).NotTo(ContainSubstring(depv1alpha1.ConditionDependentsIndexed), "the controller owns the webhook's condition")
			}
			if mf.Manager == conditions.FieldOwner {
				Expect(string(mf.FieldsV1.Raw)).NotTo(ContainSubstring(depv1alpha1.ConditionReady), "the webhook owns the controller's condition")
			}
		}

		applyWebhookCondition(metav1.ConditionTrue, depv1alpha1.ReasonIndexed, "indexed")
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionReady, metav1.ConditionTrue)
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionDependentsIndexed, metav1.ConditionTrue, "indexed")
		Expect(cli.Cluster(compute).Delete(ctx, rule)).To(Succeed())
	})

	It("installs the labelling webhook of a dependent type once the webhook labels it, with the scheme of its rules", func(ctx context.Context) {
		rule := newRule("labelled", "gadgets", dependency{storage, "storage.test.io", "volumes", ".spec.volume"})
		Expect(cli.Cluster(compute).Create(ctx, rule)).To(Succeed())
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionWebhooksInstalled, metav1.ConditionTrue)
		Consistently(func() error { _, err := getMutating(ctx, compute); return err }).WithTimeout(time.Second).WithPolling(interval).
			ShouldNot(Succeed(), "a labelling webhook before the webhook labels")

		By("the webhook's elected replica writing DependentsLabelled under its own field manager")
		got := &depv1alpha1.DependencyRule{}
		Expect(cli.Cluster(compute).Get(ctx, client.ObjectKey{Name: rule.Name}, got)).To(Succeed())
		ac := rulestatus.Apply(rule.Name, got.UID, depac.DependencyRuleStatus(), metav1.Condition{
			Type: depv1alpha1.ConditionDependentsLabelled, Status: metav1.ConditionUnknown, Reason: depv1alpha1.ReasonLabelling, Message: "labelling",
			ObservedGeneration: got.Generation, LastTransitionTime: metav1.Now(),
		})
		Expect(cli.Cluster(compute).Status().Apply(ctx, ac, client.FieldOwner(conditions.LabelsFieldOwner), client.ForceOwnership)).To(Succeed())
		scheme, reason := reflabels.SchemeOf([]reflabels.Rule{reflabels.RuleOf(got)})
		Expect(reason).To(BeEmpty())
		Eventually(func(g Gomega) {
			cfg, err := getMutating(ctx, compute)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg.Webhooks).To(HaveLen(1))
			wh := cfg.Webhooks[0]
			g.Expect(wh.Name).To(Equal("gadgets.compute.test.io." + webhookconfig.LabelsWebhookSuffix))
			g.Expect(*wh.ClientConfig.URL).To(HaveSuffix("/" + webhookconfig.EndpointLabels + "/" + scheme.Fingerprint))
			g.Expect(*wh.FailurePolicy).To(Equal(admissionregistrationv1.Fail))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("a rule that no longer exists takes the labelling webhook with it")
		Expect(cli.Cluster(compute).Delete(ctx, rule)).To(Succeed())
		Eventually(func() bool { _, err := getMutating(ctx, compute); return apierrors.IsNotFound(err) }).
			WithTimeout(timeout).WithPolling(interval).Should(BeTrue())
	})

	It("reports a binding that has not accepted the claim on mutatingwebhookconfigurations, and installs once it has (the upgrade step)", func(ctx context.Context) {
		By("a provider that bound a release without the claim")
		_, old := envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("old-binding"))
		binding, err := kcpenv.BindAPIExport(ctx, cli.Cluster(old), cli.Cluster(depCtrl), depCtrl, kcpenv.DepCtrlExportName)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error {
			if err := cli.Cluster(old).Get(ctx, client.ObjectKeyFromObject(binding), binding); err != nil {
				return err
			}
			binding.Spec.PermissionClaims = slices.DeleteFunc(binding.Spec.PermissionClaims, func(c apisv1alpha2.AcceptablePermissionClaim) bool {
				return c.Resource == "mutatingwebhookconfigurations"
			})
			return cli.Cluster(old).Update(ctx, binding)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		rule := newRule("old-binding", "gadgets", dependency{storage, "storage.test.io", "volumes", ".spec.volume"})
		rule.Spec.Dependent.APIExportName = "gadgets.test.io"
		Expect(cli.Cluster(old).Create(ctx, rule)).To(Succeed())
		expectCondition(ctx, old, rule.Name, depv1alpha1.ConditionWebhooksInstalled, metav1.ConditionTrue)
		got := &depv1alpha1.DependencyRule{}
		Expect(cli.Cluster(old).Get(ctx, client.ObjectKey{Name: rule.Name}, got)).To(Succeed())
		ac := rulestatus.Apply(rule.Name, got.UID, depac.DependencyRuleStatus(), metav1.Condition{
			Type: depv1alpha1.ConditionDependentsLabelled, Status: metav1.ConditionUnknown, Reason: depv1alpha1.ReasonLabelling, Message: "labelling",
			ObservedGeneration: got.Generation, LastTransitionTime: metav1.Now(),
		})
		Expect(cli.Cluster(old).Status().Apply(ctx, ac, client.FieldOwner(conditions.LabelsFieldOwner), client.ForceOwnership)).To(Succeed())
		expectCondition(ctx, old, rule.Name, depv1alpha1.ConditionWebhooksInstalled, metav1.ConditionFalse,
			"accepted the permission claim on mutatingwebhookconfigurations")
		Eventually(func(g Gomega) {
			got, err := protectedResources(ctx, storage)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(ContainElement("storage.test.io/v1/volumes [DELETE]"), "deletes stay protected")
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("accepting the claim, as docs/operations.md says")
		Expect(kcpenv.AcceptClaims(ctx, cli.Cluster(old), cli.Cluster(depCtrl), kcpenv.DepCtrlExportName)).To(Succeed())
		expectCondition(ctx, old, rule.Name, depv1alpha1.ConditionWebhooksInstalled, metav1.ConditionTrue)
		Eventually(func() error { _, err := getMutating(ctx, old); return err }).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(cli.Cluster(old).Delete(ctx, rule)).To(Succeed())
	})

	It("removes a stale configuration on restart when its rule was deleted while the controller was stopped", func(ctx context.Context) {
		stop()
		Expect(cli.Cluster(compute).Delete(ctx, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "vm-to-volume"}})).To(Succeed())
		Consistently(func() error {
			_, err := getConfig(ctx, nested)
			return err
		}).WithTimeout(2*time.Second).Should(Succeed(), "nothing removes the configuration while the controller is stopped")

		stop = startController(depCtrl, controllerOptions(caFile))
		expectNoConfig(ctx, nested)
	})

	It("rolls a changed webhook URL and CA bundle out to every configuration", func(ctx context.Context) {
		Expect(cli.Cluster(compute).Create(ctx, newRule("vm-to-vpc-2", "virtualmachines",
			dependency{network, "network.test.io", "vpcs", ".spec.vpcRef.name"},
			dependency{nested, "storage.test.io", "volumes", ".spec.volumeRef.name"}))).To(Succeed())
		expectProtects(ctx, network, "network.test.io/v1/vpcs [DELETE]")
		expectProtects(ctx, nested, "storage.test.io/v1/volumes [DELETE]")

		expectWebhook := func(url string, ca []byte) {
			GinkgoHelper()
			for _, ws := range []logicalcluster.Path{network, nested} {
				Eventually(func(g Gomega) {
					cfg, err := getConfig(ctx, ws)
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(*cfg.Webhooks[0].ClientConfig.URL).To(HavePrefix(url + "/"))
					g.Expect(cfg.Webhooks[0].ClientConfig.CABundle).To(Equal(ca))
				}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
			}
		}

		By("restarting with another URL and CA bundle")
		stop()
		opts := controllerOptions(caFile)
		opts.WebhookURL = "https://webhook.example:8443/validate"
		rotated := writeCA(caFile)
		stop = startController(depCtrl, opts)
		expectWebhook("https://webhook.example:8443/validate", rotated)

		By("rotating the CA bundle while running: the new bundle is rolled out without a restart")
		rotatedAgain := writeCA(caFile)
		expectWebhook("https://webhook.example:8443/validate", rotatedAgain)
		Expect(cli.Cluster(compute).Delete(ctx, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "vm-to-vpc-2"}})).To(Succeed())
		expectNoConfig(ctx, network)
		expectNoConfig(ctx, nested)
	})

	It("reports a path that cannot be resolved in TargetsResolved, naming the path, and records an event", func(ctx context.Context) {
		missing := logicalcluster.NewPath("root:does-not-exist:network")
		rule := newRule("broken", "virtualmachines",
			dependency{missing, "network.test.io", "vpcs", ".spec.vpcRef.name"},
			dependency{network, "network.test.io", "vpcs", ".spec.backupVPC"})
		Expect(cli.Cluster(compute).Create(ctx, rule)).To(Succeed())

		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionTargetsResolved, metav1.ConditionFalse,
			"no workspace at "+missing.String()+" binds the APIExport "+kcpenv.DepCtrlExportName)
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionReady, metav1.ConditionFalse, missing.String())
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionWebhooksInstalled, metav1.ConditionFalse, "installed in "+network.String())
		expectProtects(ctx, network, "network.test.io/v1/vpcs [DELETE]")

		Eventually(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(cli.Cluster(compute).List(ctx, list)).To(Succeed())
			var reasons []string
			for _, e := range list.Items {
				if e.Regarding.Name == rule.Name {
					reasons = append(reasons, e.Reason+": "+e.Note)
				}
			}
			g.Expect(reasons).To(ContainElement(And(HavePrefix(controller.EventReasonResolutionFailed), ContainSubstring(missing.String()))))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		Expect(cli.Cluster(compute).Delete(ctx, rule)).To(Succeed())
		expectNoConfig(ctx, network)
	})

	It("reports a workspace that does not bind the APIExport, naming it, and protects it once it binds", func(ctx context.Context) {
		unbound := workspace(ctx, core.RootCluster.Path(), "unbound", nil)
		rule := newRule("unbound", "virtualmachines", dependency{unbound, "network.test.io", "vpcs", ".spec.vpcRef.name"})
		Expect(cli.Cluster(compute).Create(ctx, rule)).To(Succeed())
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionTargetsResolved, metav1.ConditionFalse,
			"no workspace at "+unbound.String()+" binds the APIExport "+kcpenv.DepCtrlExportName)
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionWebhooksInstalled, metav1.ConditionFalse)

		By("binding the export, after which the webhook is installed")
		_, err := kcpenv.BindAPIExport(ctx, cli.Cluster(unbound), cli.Cluster(depCtrl), depCtrl, kcpenv.DepCtrlExportName)
		Expect(err).NotTo(HaveOccurred())
		expectProtects(ctx, unbound, "network.test.io/v1/vpcs [DELETE]")
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionReady, metav1.ConditionTrue)

		Expect(cli.Cluster(compute).Delete(ctx, rule)).To(Succeed())
		expectNoConfig(ctx, unbound)
	})

	It("reports cycles across rules on every rule of the cycle without blocking", func(ctx context.Context) {
		vmToVPC := newRule("cycle-vm", "virtualmachines", dependency{network, "network.test.io", "vpcs", ".spec.vpcRef.name"})
		vmToVPC.Spec.Dependent.Group = "compute.test.io"
		Expect(cli.Cluster(compute).Create(ctx, vmToVPC)).To(Succeed())

		vpcToVM := newRule("cycle-vpc", "vpcs", dependency{compute, "compute.test.io", "virtualmachines", ".spec.gatewayVM"})
		vpcToVM.Spec.Dependent.Group, vpcToVM.Spec.Dependent.APIExportName = "network.test.io", "network.test.io"
		Expect(cli.Cluster(network).Create(ctx, vpcToVM)).To(Succeed())

		cycle := "virtualmachines.compute.test.io → vpcs.network.test.io → virtualmachines.compute.test.io"
		expectCondition(ctx, compute, vmToVPC.Name, depv1alpha1.ConditionDependencyCycle, metav1.ConditionTrue, cycle, depv1alpha1.AnnotationSkipProtection)
		expectCondition(ctx, network, vpcToVM.Name, depv1alpha1.ConditionDependencyCycle, metav1.ConditionTrue,
			"vpcs.network.test.io → virtualmachines.compute.test.io → vpcs.network.test.io")
		expectCondition(ctx, compute, vmToVPC.Name, depv1alpha1.ConditionReady, metav1.ConditionTrue)
		expectCondition(ctx, network, vpcToVM.Name, depv1alpha1.ConditionReady, metav1.ConditionTrue)
		// Each workspace protects its type from deletion and checks new
		// references of its rule's dependents.
		expectProtects(ctx, compute, "compute.test.io/v1/virtualmachines [DELETE]", "compute.test.io/v1/virtualmachines [CREATE UPDATE]")
		expectProtects(ctx, network, "network.test.io/v1/vpcs [DELETE]", "network.test.io/v1/vpcs [CREATE UPDATE]")

		By("breaking the cycle")
		Expect(cli.Cluster(network).Delete(ctx, vpcToVM)).To(Succeed())
		expectCondition(ctx, compute, vmToVPC.Name, depv1alpha1.ConditionDependencyCycle, metav1.ConditionFalse)
		expectProtects(ctx, compute, "compute.test.io/v1/virtualmachines [CREATE UPDATE]")
		expectProtects(ctx, network, "network.test.io/v1/vpcs [DELETE]")
		Expect(cli.Cluster(compute).Delete(ctx, vmToVPC)).To(Succeed())
		expectNoConfig(ctx, network)
		expectNoConfig(ctx, compute)
	})
})

var _ = Describe("Controller startup", func() {
	It("fails with a clear error when the kubeconfig does not point at a workspace", func(ctx context.Context) {
		_, err := controllerserver.New(ctx, rest.CopyConfig(kcpConfig), controllerOptions(""), kcpenv.TestManagerOptions())
		Expect(err).To(MatchError(ContainSubstring("does not point at a kcp workspace: it must end with /clusters/<workspace path>")))
	})

	It("fails with a clear error when the workspace has no APIExportEndpointSlice for the export", func(ctx context.Context) {
		empty := workspace(ctx, core.RootCluster.Path(), "not-dep-ctrl", nil)
		cfg := rest.CopyConfig(kcpConfig)
		cfg.Host += empty.RequestPath()
		_, err := controllerserver.New(ctx, cfg, controllerOptions(""), kcpenv.TestManagerOptions())
		Expect(err).To(MatchError(And(
			ContainSubstring(`APIExportEndpointSlice "dependencies.opendefense.cloud" not found`),
			ContainSubstring("is the kubeconfig pointing at the workspace of the APIExport"))))
	})

	It("fails with a clear error when the webhook's CA bundle is not a PEM certificate", func(ctx context.Context) {
		caFile := filepath.Join(GinkgoT().TempDir(), "ca.crt")
		Expect(os.WriteFile(caFile, []byte("not a certificate"), 0o600)).To(Succeed())
		_, err := controllerserver.New(ctx, rest.CopyConfig(kcpConfig), controllerOptions(caFile), kcpenv.TestManagerOptions())
		Expect(err).To(MatchError(ContainSubstring("contains no PEM certificate")))
	})
})

// updateRule changes a rule of a workspace and returns it, retrying on
// conflicts with the controller's status writes.
func updateRule(ctx context.Context, ws logicalcluster.Path, name string, mutate func(*depv1alpha1.DependencyRule)) *depv1alpha1.DependencyRule {
	GinkgoHelper()
	rule := &depv1alpha1.DependencyRule{}
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: name}, rule); err != nil {
			return err
		}
		mutate(rule)
		return cli.Cluster(ws).Update(ctx, rule)
	})).To(Succeed())
	return rule
}
