package kcpcontract

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	"github.com/kcp-dev/sdk/apis/core"

	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

const (
	// group is the API group of the provider's export, and its name.
	group = "contract.test.io"
	// holdFinalizer keeps an object, and so its namespace, from going away.
	holdFinalizer = "contract.test.io/hold"
	// stepAnnotation tags each write of a spec, so that its review can be
	// told apart from the others.
	stepAnnotation = "contract.test.io/step"

	timeout = time.Minute
	poll    = 200 * time.Millisecond
)

var (
	widgetGVR = schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	eventGVR  = schema.GroupVersionResource{Version: "v1", Resource: "events"}
)

// widget returns a Widget, the provider's namespaced type (with a status
// subresource).
func widget(namespace, name string, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"size": int64(1)}}}
	u.SetAPIVersion(widgetGVR.GroupVersion().String())
	u.SetKind("Widget")
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetLabels(labels)
	return u
}

// mergePatch returns the JSON of a merge patch.
func mergePatch(patch map[string]any) []byte {
	raw, err := json.Marshal(patch)
	Expect(err).NotTo(HaveOccurred())
	return raw
}

// vwConfig returns a config of user for the logical cluster cluster
// through the virtual workspace at base.
func vwConfig(base string, user *rest.Config, cluster logicalcluster.Name) *rest.Config {
	cfg := rest.CopyConfig(user)
	cfg.Host = base + cluster.Path().RequestPath()
	return cfg
}

// resourceIn returns a dynamic client of gvr in namespace for cfg.
func resourceIn(cfg *rest.Config, gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	dyn, err := dynamic.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	return dyn.Resource(gvr).Namespace(namespace)
}

// names returns the names of the objects in a list.
func names(list *unstructured.UnstructuredList) []string {
	out := make([]string, 0, len(list.Items))
	for _, item := range list.Items {
		out = append(out, item.GetName())
	}
	return out
}

// hook is what a test configuration matches.
type hook struct {
	operations  []admissionregistrationv1.OperationType
	resources   []string
	conditions  []admissionregistrationv1.MatchCondition
	sideEffects admissionregistrationv1.SideEffectClass
}

func (h hook) rules() []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: h.operations,
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: h.resources,
			Scope: ptr.To(admissionregistrationv1.AllScopes),
		},
	}}
}

func (h hook) sideEffectClass() *admissionregistrationv1.SideEffectClass {
	if h.sideEffects == "" {
		return ptr.To(admissionregistrationv1.SideEffectClassNone)
	}
	return ptr.To(h.sideEffects)
}

var (
	create = admissionregistrationv1.Create
	update = admissionregistrationv1.Update
	del    = admissionregistrationv1.Delete
)

var _ = Describe("kcp", Ordered, ContinueOnFailure, func() {
	var (
		// provider is the workspace of the APIExport contract.test.io,
		// which serves Widgets; both consumers bind it and accepted its
		// claim on events.
		provider         logicalcluster.Path
		consumers        [2]logicalcluster.Path
		consumerClusters [2]logicalcluster.Name
		rec              *recorder
		// vwURL is the provider's APIExport virtual workspace.
		vwURL string
		// vwUser may get, list, watch, create and patch the content of
		// the provider's export, as the project's webhook may.
		vwUser *rest.Config
	)

	addUser := func(name string) *rest.Config {
		GinkgoHelper()
		cfg, err := kcp.AddUser(name)
		Expect(err).NotTo(HaveOccurred())
		return cfg
	}
	// grantContent lets user use verbs on apiexports/content of the export
	// in the workspace ws, as a provider grants the project's webhook.
	grantContent := func(ctx context.Context, ws logicalcluster.Path, user, export string, verbs ...string) {
		GinkgoHelper()
		name := user + "-" + export
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
			{NonResourceURLs: []string{"/"}, Verbs: []string{"access"}},
			{APIGroups: []string{"apis.kcp.io"}, Resources: []string{"apiexports/content"}, ResourceNames: []string{export}, Verbs: verbs},
		}}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		Expect(cli.Cluster(ws).Create(ctx, role)).To(Succeed())
		Expect(cli.Cluster(ws).Create(ctx, binding)).To(Succeed())
	}
	// endpointURL returns the URL of the virtual workspace of the export in
	// ws, from its APIExportEndpointSlice.
	endpointURL := func(ctx context.Context, ws logicalcluster.Path, export string) string {
		GinkgoHelper()
		var url string
		Eventually(func(g Gomega) {
			slice := &apisv1alpha1.APIExportEndpointSlice{}
			g.Expect(cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: export}, slice)).To(Succeed())
			g.Expect(slice.Status.APIExportEndpoints).NotTo(BeEmpty())
			url = slice.Status.APIExportEndpoints[0].URL
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		return url
	}
	// vwWidgets returns the Widgets of namespace in cluster through the
	// provider's virtual workspace, as user.
	vwWidgets := func(user *rest.Config, cluster logicalcluster.Name, namespace string) dynamic.ResourceInterface {
		return resourceIn(vwConfig(vwURL, user, cluster), widgetGVR, namespace)
	}
	// get reads a Widget of the namespace default.
	get := func(ctx context.Context, ws logicalcluster.Path, name string) *unstructured.Unstructured {
		GinkgoHelper()
		o := widget("default", name, nil)
		Expect(cli.Cluster(ws).Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
		return o
	}
	patch := func(ctx context.Context, ws logicalcluster.Path, namespace, name string, p map[string]any) (*unstructured.Unstructured, error) {
		o := widget(namespace, name, nil)
		err := cli.Cluster(ws).Patch(ctx, o, client.RawPatch(types.MergePatchType, mergePatch(p)))
		return o, err
	}
	release := func(ctx context.Context, ws logicalcluster.Path, namespace, name string) {
		GinkgoHelper()
		_, err := patch(ctx, ws, namespace, name, map[string]any{"metadata": map[string]any{"finalizers": nil}})
		Expect(client.IgnoreNotFound(err)).To(Succeed())
	}

	// installValidating makes responder f answer endpoint and creates a
	// ValidatingWebhookConfiguration for it in the provider's workspace,
	// until the spec ends.
	installValidating := func(ctx context.Context, endpoint string, h hook, f responder) {
		GinkgoHelper()
		unregister := rec.respond(endpoint, f)
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "contract-" + endpoint},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name:                    endpoint + ".contract.test.io",
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(rec.endpointURL(endpoint)), CABundle: rec.CABundle},
				Rules:                   h.rules(),
				MatchConditions:         h.conditions,
				SideEffects:             h.sideEffectClass(),
				AdmissionReviewVersions: []string{"v1"},
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
				TimeoutSeconds:          ptr.To(int32(10)),
			}},
		}
		Expect(cli.Cluster(provider).Create(ctx, cfg)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(cli.Cluster(provider).Delete(ctx, cfg))).To(Succeed())
			unregister()
		})
	}
	// installMutating is installValidating for a
	// MutatingWebhookConfiguration.
	installMutating := func(ctx context.Context, endpoint string, h hook, f responder) {
		GinkgoHelper()
		unregister := rec.respond(endpoint, f)
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "contract-" + endpoint},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name:                    endpoint + ".contract.test.io",
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(rec.endpointURL(endpoint)), CABundle: rec.CABundle},
				Rules:                   h.rules(),
				MatchConditions:         h.conditions,
				SideEffects:             h.sideEffectClass(),
				AdmissionReviewVersions: []string{"v1"},
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
				TimeoutSeconds:          ptr.To(int32(10)),
				ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			}},
		}
		Expect(cli.Cluster(provider).Create(ctx, cfg)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(cli.Cluster(provider).Delete(ctx, cfg))).To(Succeed())
			unregister()
		})
	}
	// probeCreate is a dry-run CREATE of a Widget in consumer i.
	probeCreate := func(ctx context.Context, i int) error {
		return cli.Cluster(consumers[i]).Create(ctx, widget("default", "probe-create", nil), client.DryRunAll)
	}
	// probeDelete is a dry-run DELETE of the Widget "probe" of consumer i.
	probeDelete := func(ctx context.Context, i int) error {
		return cli.Cluster(consumers[i]).Delete(ctx, widget("default", "probe", nil), client.DryRunAll)
	}
	// awaitCalled repeats probe in consumer i until kcp has called endpoint
	// for a dry run there: a new configuration takes effect a moment after
	// it was created.
	awaitCalled := func(ctx context.Context, endpoint string, i int, probe func(context.Context, int) error) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			_ = probe(ctx, i)
			g.Expect(rec.callsTo(endpoint, func(c call) bool { return c.DryRun && c.cluster() == consumerClusters[i].String() })).NotTo(BeEmpty())
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), "kcp never called the configuration %q for %s", endpoint, consumers[i])
	}
	// notDry matches the calls about the object name that are not dry runs.
	notDry := func(name string) func(call) bool {
		return func(c call) bool { return !c.DryRun && c.objectName() == name }
	}

	BeforeAll(func(ctx SpecContext) {
		root := core.RootCluster.Path()
		ws, p := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("provider"))
		provider = p
		GinkgoWriter.Printf("provider workspace %s (logical cluster %s)\n", provider, ws.Spec.Cluster)
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(provider), group, kcpenv.Resource{Kind: "Widget", Plural: "widgets", Status: true})).To(Succeed())
		for i := range consumers {
			ws, consumers[i] = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("consumer"))
			consumerClusters[i] = logicalcluster.Name(ws.Spec.Cluster)
			_, err := kcpenv.BindAPIExport(ctx, cli.Cluster(consumers[i]), cli.Cluster(provider), provider, group)
			Expect(err).NotTo(HaveOccurred())
			Eventually(func() error {
				return cli.Cluster(consumers[i]).Create(ctx, widget("default", "probe", nil))
			}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		}

		var err error
		rec, err = startRecorder()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(rec.stop)

		vwUser = addUser("contract-vw")
		grantContent(ctx, provider, "contract-vw", group, "get", "list", "watch", "create", "patch")
		vwURL = endpointURL(ctx, provider, group)
		GinkgoWriter.Printf("virtual workspace of %s: %s\n", group, vwURL)
		Eventually(func() error {
			_, err := vwWidgets(vwUser, consumerClusters[0], "default").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), "the grant on apiexports/content never took effect")
	})

	// docs/architecture.md#request-flow-of-a-delete (steps 1, 2 and 5: the
	// configuration in the provider's workspace, kcp.io/cluster) and
	// docs/architecture.md#new-references-to-objects-being-deleted (the
	// same configuration on CREATE and UPDATE of dependents).
	It("calls a ValidatingWebhookConfiguration of an APIExport's workspace for CREATE, UPDATE and DELETE of the bound resource in every consumer workspace, with the consumer's logical cluster in kcp.io/cluster, and its denial refuses the DELETE", func(ctx SpecContext) {
		const ep = "bound-resource"
		installValidating(ctx, ep, hook{operations: []admissionregistrationv1.OperationType{create, update, del}, resources: []string{"widgets"}},
			func(_ context.Context, c call) verdict {
				if c.Operation == admissionv1.Delete && strings.HasPrefix(c.objectName(), "deny-") {
					return deny("contract: refused by the recorder")
				}
				return allow
			})
		for i, ws := range consumers {
			cluster := consumerClusters[i]
			awaitCalled(ctx, ep, i, probeCreate)
			name := fmt.Sprintf("bound-%d", i)
			Expect(cli.Cluster(ws).Create(ctx, widget("default", name, nil))).To(Succeed())
			_, err := patch(ctx, ws, "default", name, map[string]any{"metadata": map[string]any{"labels": map[string]any{"changed": "yes"}}})
			Expect(err).NotTo(HaveOccurred())
			Expect(cli.Cluster(ws).Delete(ctx, widget("default", name, nil))).To(Succeed())

			// kcp admits an UPDATE or DELETE again when the object it
			// started from (its watch cache's) turns out to be stale, so
			// there may be more than one call per write; the last one is
			// on the stored state.
			calls := rec.callsTo(ep, notDry(name))
			creates, updates, deletes := byOperation(calls, admissionv1.Create), byOperation(calls, admissionv1.Update), byOperation(calls, admissionv1.Delete)
			Expect(creates).To(HaveLen(1), "the CREATE in %s", ws)
			Expect(updates).NotTo(BeEmpty(), "the UPDATE in %s", ws)
			Expect(deletes).NotTo(BeEmpty(), "the DELETE in %s", ws)
			Expect(creates[0].Object.GetAnnotations()).To(HaveKeyWithValue(logicalcluster.AnnotationKey, cluster.String()), "the CREATE's object")
			for _, u := range updates {
				Expect(u.Object.GetAnnotations()).To(HaveKeyWithValue(logicalcluster.AnnotationKey, cluster.String()), "the UPDATE's object")
				Expect(u.OldObject.GetAnnotations()).To(HaveKeyWithValue(logicalcluster.AnnotationKey, cluster.String()), "the UPDATE's oldObject")
			}
			for _, d := range deletes {
				Expect(d.Name).To(Equal(name))
				Expect(d.Namespace).To(Equal("default"))
				Expect(d.Object).To(BeNil(), "a DELETE has no object")
				Expect(d.OldObject).NotTo(BeNil())
				Expect(d.OldObject.GetAnnotations()).To(HaveKeyWithValue(logicalcluster.AnnotationKey, cluster.String()), "the DELETE's oldObject")
			}
			Expect(deletes[len(deletes)-1].OldObject.GetLabels()).To(HaveKeyWithValue("changed", "yes"), "the last DELETE review is on the stored state")

			By("refusing the DELETE the webhook denies, in " + ws.String())
			denied := fmt.Sprintf("deny-%d", i)
			Expect(cli.Cluster(ws).Create(ctx, widget("default", denied, nil))).To(Succeed())
			err = cli.Cluster(ws).Delete(ctx, widget("default", denied, nil))
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleting %s: %v", denied, err)
			Expect(err.Error()).To(ContainSubstring("contract: refused by the recorder"))
			Expect(get(ctx, ws, denied).GetDeletionTimestamp()).To(BeNil())
		}
	})

	// docs/architecture.md#new-references-to-objects-being-deleted (step 2:
	// the references-may-change condition), docs/architecture.md#reference-labels
	// (the labelling webhook's condition), docs/architecture.md#records and
	// docs/architecture.md#the-fast-paths-and-why-each-is-sound (an UPDATE
	// that changes nothing of interest calls no webhook).
	It("evaluates the matchConditions of an APIExport workspace's configuration on the consumer's request, with object, oldObject and request.operation, and calls no webhook when one is false", func(ctx SpecContext) {
		const ep = "match-conditions"
		const prefix = "x.contract.test.io/"
		// changedIn: a label of a with the prefix is not in b with the same
		// value (the style of webhookconfig.LabelsCondition).
		changedIn := func(a, b string) string {
			return fmt.Sprintf("has(%[1]s.metadata.labels) && %[1]s.metadata.labels.exists(k, k.startsWith(%[3]q) && !(has(%[2]s.metadata.labels) && k in %[2]s.metadata.labels && %[2]s.metadata.labels[k] == %[1]s.metadata.labels[k]))", a, b, prefix)
		}
		conditions := []admissionregistrationv1.MatchCondition{
			{Name: "labels-or-spec-changed", Expression: "request.operation != 'UPDATE' || " + changedIn("object", "oldObject") + " || " + changedIn("oldObject", "object") +
				` || ["spec"].exists(f, (f in object) != (f in oldObject) || f in object && object[f] != oldObject[f])`},
			{Name: "not-skipped", Expression: `request.operation != 'DELETE' || !(has(oldObject.metadata.labels) && "contract.test.io/skip" in oldObject.metadata.labels)`},
		}
		installValidating(ctx, ep, hook{operations: []admissionregistrationv1.OperationType{create, update, del}, resources: []string{"widgets"}, conditions: conditions}, nil)
		awaitCalled(ctx, ep, 0, probeCreate)

		ws := consumers[0]
		// stored is the resourceVersion of the Widget "conditions".
		var stored string
		// step writes the merge patch p to the Widget "conditions", tagged
		// with tag, and returns the calls kcp made for that UPDATE. kcp may
		// call more than once for one UPDATE (it admits again when the
		// object it started from, its watch cache's, was stale); the last
		// call is on the stored state.
		step := func(tag string, p map[string]any) []call {
			GinkgoHelper()
			meta, _ := p["metadata"].(map[string]any)
			if meta == nil {
				meta = map[string]any{}
				p["metadata"] = meta
			}
			meta["annotations"] = map[string]any{stepAnnotation: tag}
			before := stored
			written, err := patch(ctx, ws, "default", "conditions", p)
			Expect(err).NotTo(HaveOccurred())
			stored = written.GetResourceVersion()
			calls := rec.callsTo(ep, func(c call) bool {
				return !c.DryRun && c.Operation == admissionv1.Update && c.objectName() == "conditions" && c.Object.GetAnnotations()[stepAnnotation] == tag
			})
			if len(calls) > 1 {
				GinkgoWriter.Printf("UPDATE %q: %d calls, on the oldObject versions %v (stored: %s)\n", tag, len(calls), oldVersions(calls), before)
			}
			if len(calls) > 0 {
				Expect(calls[len(calls)-1].OldObject.GetResourceVersion()).To(Equal(before), "the last call of UPDATE %q is on the stored state", tag)
			}
			return calls
		}
		labels := func(l map[string]any) map[string]any { return map[string]any{"metadata": map[string]any{"labels": l}} }

		created := widget("default", "conditions", map[string]string{"other": "1"})
		Expect(cli.Cluster(ws).Create(ctx, created)).To(Succeed())
		stored = created.GetResourceVersion()
		Expect(rec.callsTo(ep, func(c call) bool {
			return !c.DryRun && c.Operation == admissionv1.Create && c.objectName() == "conditions"
		})).To(HaveLen(1), "a CREATE")

		Expect(step("other-label", labels(map[string]any{"other": "2"}))).To(BeEmpty(), "an UPDATE of a label without the prefix")
		calls := step("label-added", labels(map[string]any{prefix + "a": "1"}))
		Expect(calls).NotTo(BeEmpty(), "an UPDATE that adds a label with the prefix")
		last := calls[len(calls)-1]
		Expect(last.OldObject.GetLabels()).To(Equal(map[string]string{"other": "2"}), "oldObject is the stored object")
		Expect(last.Object.GetLabels()).To(Equal(map[string]string{"other": "2", prefix + "a": "1"}), "object is the new one")
		Expect(step("label-changed", labels(map[string]any{prefix + "a": "2"}))).NotTo(BeEmpty(), "an UPDATE that changes a label with the prefix")
		Expect(step("annotation-only", map[string]any{})).To(BeEmpty(), "an UPDATE of an annotation")
		Expect(step("label-removed", labels(map[string]any{prefix + "a": nil}))).NotTo(BeEmpty(), "an UPDATE that removes a label with the prefix")
		Expect(step("spec-changed", map[string]any{"spec": map[string]any{"size": 2}})).NotTo(BeEmpty(), "an UPDATE of the spec")

		Expect(cli.Cluster(ws).Delete(ctx, widget("default", "conditions", nil))).To(Succeed())
		Expect(rec.callsTo(ep, func(c call) bool { return c.Operation == admissionv1.Delete && c.objectName() == "conditions" })).NotTo(BeEmpty(), "a DELETE")

		By("not calling the webhook for a DELETE whose oldObject fails the condition")
		Expect(cli.Cluster(ws).Create(ctx, widget("default", "conditions-skip", map[string]string{"contract.test.io/skip": "true"}))).To(Succeed())
		Expect(cli.Cluster(ws).Delete(ctx, widget("default", "conditions-skip", nil))).To(Succeed())
		Expect(rec.callsTo(ep, func(c call) bool { return c.Operation == admissionv1.Delete && c.objectName() == "conditions-skip" })).To(BeEmpty())
	})

	// docs/architecture.md#teardown (items of kcp's DeleteCollection: no
	// name, system:apiserver in system:masters).
	It("sends each item of kcp's own namespace deletion to DELETE admission without a request name, the name only in oldObject, from system:apiserver in group system:masters", func(ctx SpecContext) {
		const ep = "namespace-teardown"
		installValidating(ctx, ep, hook{operations: []admissionregistrationv1.OperationType{del}, resources: []string{"widgets"}}, nil)
		awaitCalled(ctx, ep, 1, probeDelete)

		ws := consumers[1]
		const ns = "teardown"
		Expect(cli.Cluster(ws).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		for _, name := range []string{"teardown-a", "teardown-b"} {
			Expect(cli.Cluster(ws).Create(ctx, widget(ns, name, nil))).To(Succeed())
		}
		Expect(cli.Cluster(ws).Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Eventually(func(g Gomega) {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(widgetGVR.GroupVersion().WithKind("WidgetList"))
			g.Expect(cli.Cluster(ws).List(ctx, list, client.InNamespace(ns))).To(Succeed())
			g.Expect(list.Items).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), "kcp did not delete the namespace's Widgets")

		calls := rec.callsTo(ep, func(c call) bool { return c.Namespace == ns })
		Expect(calls).NotTo(BeEmpty())
		seen := map[string]bool{}
		for _, c := range calls {
			GinkgoWriter.Printf("teardown item: name=%q oldObject=%s user=%+v options=%v\n", c.Name, c.objectName(), c.User, c.Options)
			Expect(c.Operation).To(Equal(admissionv1.Delete))
			Expect(c.Name).To(BeEmpty(), "the request names no object")
			Expect(c.OldObject).NotTo(BeNil())
			Expect(c.OldObject.GetAnnotations()).To(HaveKeyWithValue(logicalcluster.AnnotationKey, consumerClusters[1].String()))
			Expect(c.User.Username).To(Equal("system:apiserver"))
			Expect(c.User.Groups).To(ContainElement("system:masters"))
			seen[c.OldObject.GetName()] = true
		}
		Expect(seen).To(Equal(map[string]bool{"teardown-a": true, "teardown-b": true}), "every item, named in oldObject")
	})

	// docs/architecture.md#teardown ("The namespace is being deleted": the
	// probe and "kcp creates nothing in such a namespace") and
	// docs/architecture.md#the-fast-paths-and-why-each-is-sound.
	It("refuses every CREATE in a terminating namespace, bound resources included, and a dry-run Event CREATE through the provider's APIExport virtual workspace with the cause NamespaceTerminating", func(ctx SpecContext) {
		ws, cluster := consumers[0], consumerClusters[0]
		const ns = "terminating"
		Expect(cli.Cluster(ws).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		held := widget(ns, "held", nil)
		held.SetFinalizers([]string{holdFinalizer})
		Expect(cli.Cluster(ws).Create(ctx, held)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { release(ctx, ws, ns, "held") })

		events := resourceIn(vwConfig(vwURL, vwUser, cluster), eventGVR, ns)
		// probeEvent is a dry-run CREATE of an Event about involved
		// through the provider's virtual workspace.
		probeEvent := func(involved corev1.ObjectReference) error {
			ev, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&corev1.Event{
				TypeMeta:       metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "contract-probe.", Namespace: ns},
				InvolvedObject: involved,
				Reason:         "Probe", Message: "a dry run", Type: corev1.EventTypeNormal,
				Source: corev1.EventSource{Component: "kcp-contract"},
			})
			Expect(err).NotTo(HaveOccurred())
			_, err = events.Create(ctx, &unstructured.Unstructured{Object: ev}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}
		aboutHeld := corev1.ObjectReference{APIVersion: widgetGVR.GroupVersion().String(), Kind: "Widget", Namespace: ns, Name: "held"}
		// The project's probe (internal/index/namespaces.go) names the
		// Namespace, in the namespace itself: Kubernetes' Event validation
		// accepts an Event whose involved object has no namespace only in
		// the namespace default.
		aboutNamespace := corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: ns, Namespace: ns}

		By("accepting the dry-run Events while the namespace is active")
		Eventually(func() error { return probeEvent(aboutHeld) }).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Expect(probeEvent(aboutNamespace)).To(Succeed(), "the project's dry-run Event about the Namespace %s", ns)
		err := probeEvent(corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: ns})
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "an Event about the Namespace %s without its namespace: %v", ns, err)

		Expect(cli.Cluster(ws).Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		terminating := func(err error) bool { return apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) }
		Eventually(func() error {
			return cli.Cluster(ws).Create(ctx, widget(ns, "late", nil), client.DryRunAll)
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Satisfy(terminating), "kcp kept admitting Widgets into the terminating namespace")

		By("refusing Widgets (directly and through the virtual workspace), a ConfigMap and the dry-run Events, each with the cause NamespaceTerminating")
		err = cli.Cluster(ws).Create(ctx, widget(ns, "late", nil))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "creating a Widget: %v", err)
		Expect(err).To(Satisfy(terminating), "creating a Widget")
		_, err = vwWidgets(vwUser, cluster, ns).Create(ctx, widget(ns, "late", nil), metav1.CreateOptions{})
		Expect(err).To(Satisfy(terminating), "creating a Widget through the virtual workspace")
		err = cli.Cluster(ws).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"}})
		Expect(err).To(Satisfy(terminating), "creating a ConfigMap")
		err = probeEvent(aboutHeld)
		Expect(err).To(Satisfy(terminating), "a dry-run Event about a Widget through the virtual workspace")
		err = probeEvent(aboutNamespace)
		Expect(err).To(Satisfy(terminating), "the project's dry-run Event about the Namespace through the virtual workspace")
		namespace := &corev1.Namespace{}
		Expect(cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: ns}, namespace)).To(Succeed())
		Expect(namespace.Status.Phase).To(Equal(corev1.NamespaceTerminating), "the held Widget keeps the namespace terminating")
	})

	// docs/architecture.md#deferred-deletion-replay ("kcp ... admits the
	// same DELETE again on the recorded state").
	It("admits a refused DELETE again on the new state when the webhook changed the object meanwhile", func(ctx SpecContext) {
		const ep = "deferred-deletion"
		const requested = "contract.test.io/deletion-requested"
		ws := consumers[0]
		installValidating(ctx, ep, hook{operations: []admissionregistrationv1.OperationType{del}, resources: []string{"widgets"}, sideEffects: admissionregistrationv1.SideEffectClassNoneOnDryRun},
			func(ctx context.Context, c call) verdict {
				if !strings.HasPrefix(c.objectName(), "replay-") {
					return allow
				}
				if c.DryRun {
					return deny("dry run")
				}
				if _, ok := c.OldObject.GetLabels()[requested]; ok {
					return deny("contract: already recorded")
				}
				// As the project records a deferred deletion: a merge patch
				// with the review's UID and resourceVersion as preconditions.
				_, err := patch(ctx, ws, c.OldObject.GetNamespace(), c.OldObject.GetName(), map[string]any{"metadata": map[string]any{
					"uid": c.OldObject.GetUID(), "resourceVersion": c.OldObject.GetResourceVersion(),
					"labels": map[string]any{requested: "true"},
				}})
				if err != nil {
					return deny("contract: recording failed: " + err.Error())
				}
				return deny("contract: recorded")
			})
		awaitCalled(ctx, ep, 0, probeDelete)

		for _, finalizers := range [][]string{nil, {holdFinalizer}} {
			name := "replay-plain"
			if finalizers != nil {
				name = "replay-finalized"
			}
			By("deleting " + name)
			o := widget("default", name, nil)
			o.SetFinalizers(finalizers)
			Expect(cli.Cluster(ws).Create(ctx, o)).To(Succeed())
			DeferCleanup(func(ctx context.Context) { release(ctx, ws, "default", name) })
			created := o.GetResourceVersion()
			// A consistent LIST returns once kcp's watch cache has caught
			// up with the CREATE: kcp's DELETE starts from the object in
			// the watch cache (and from etcd when the cache lacks it).
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(widgetGVR.GroupVersion().WithKind("WidgetList"))
			Expect(cli.Cluster(ws).List(ctx, list, client.InNamespace("default"))).To(Succeed())

			err := cli.Cluster(ws).Delete(ctx, widget("default", name, nil))
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleting %s: %v", name, err)
			Expect(err.Error()).To(ContainSubstring("contract: already recorded"), "the answer on the recorded state")

			stored := get(ctx, ws, name)
			Expect(stored.GetLabels()).To(HaveKeyWithValue(requested, "true"))
			Expect(stored.GetDeletionTimestamp()).To(BeNil())
			calls := rec.callsTo(ep, notDry(name))
			Expect(calls).To(HaveLen(2), "the DELETE is admitted once on the created and once on the recorded state")
			Expect(calls[0].OldObject.GetResourceVersion()).To(Equal(created))
			Expect(calls[0].OldObject.GetLabels()).NotTo(HaveKey(requested))
			Expect(calls[1].OldObject.GetResourceVersion()).To(Equal(stored.GetResourceVersion()))
			Expect(calls[1].OldObject.GetLabels()).To(HaveKeyWithValue(requested, "true"))
			Expect(calls[1].UID).NotTo(Equal(calls[0].UID), "a review of its own")
		}
	})

	// docs/architecture.md#request-flow-of-a-delete ("Why this is sound":
	// the consistent LIST) and docs/architecture.md#reference-labels ("How
	// a DELETE reads": the `!=` selector).
	It("serves a LIST without resourceVersion through the APIExport virtual workspace consistently, and a != label selector there", func(ctx SpecContext) {
		ws, cluster := consumers[1], consumerClusters[1]
		const tier = "contract.test.io/tier"
		vw := vwWidgets(vwUser, cluster, "default")
		var gold, others []string
		for i := range 20 {
			name := fmt.Sprintf("listed-%d", i)
			labels := map[string]string{tier: "silver"}
			switch i % 3 {
			case 0:
				labels[tier] = "gold"
				gold = append(gold, name)
			case 1:
				labels = nil
				others = append(others, name)
			default:
				others = append(others, name)
			}
			Expect(cli.Cluster(ws).Create(ctx, widget("default", name, labels))).To(Succeed())
			list, err := vw.List(ctx, metav1.ListOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(names(list)).To(ContainElement(name), "a LIST right after the CREATE of %s", name)
		}
		list, err := vw.List(ctx, metav1.ListOptions{LabelSelector: tier + "!=gold"})
		Expect(err).NotTo(HaveOccurred())
		Expect(names(list)).To(ContainElements(others), "those with another value and those without the label")
		Expect(names(list)).To(ContainElement("probe"))
		Expect(names(list)).NotTo(ContainElements(gold))
	})

	// docs/architecture.md#workspaces ("Consent": apiexports/content),
	// docs/architecture.md#deferred-deletion-replay (patch and delete with
	// preconditions, 409 when out of date) and docs/architecture.md#records
	// ("its patch carries the review's UID and resourceVersion as
	// preconditions").
	It("honours the provider's grants on apiexports/content in the APIExport virtual workspace, and answers 409 Conflict to a merge patch with a stale resourceVersion or with another object's uid", func(ctx SpecContext) {
		ws, cluster := consumers[0], consumerClusters[0]
		for _, name := range []string{"granted-a", "granted-b", "granted-c"} {
			Expect(cli.Cluster(ws).Create(ctx, widget("default", name, nil))).To(Succeed())
		}
		users := map[string][]string{"contract-reader": {"get", "list", "watch"}, "contract-patcher": {"get", "patch"}, "contract-deleter": {"get", "delete"}}
		vw := map[string]dynamic.ResourceInterface{}
		for user, verbs := range users {
			grantContent(ctx, provider, user, group, verbs...)
			vw[user] = vwWidgets(addUser(user), cluster, "default")
		}
		label := func(v string) []byte {
			return mergePatch(map[string]any{"metadata": map[string]any{"labels": map[string]any{"granted": v}}})
		}

		By("reading, and nothing else, with get, list and watch")
		reader := vw["contract-reader"]
		Eventually(func() error {
			_, err := reader.List(ctx, metav1.ListOptions{})
			return err
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		_, err := reader.Get(ctx, "granted-a", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		watch, err := reader.Watch(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		watch.Stop()
		_, err = reader.Patch(ctx, "granted-a", types.MergePatchType, label("reader"), metav1.PatchOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a reader's patch: %v", err)
		Expect(apierrors.IsForbidden(reader.Delete(ctx, "granted-a", metav1.DeleteOptions{}))).To(BeTrue(), "a reader's delete")

		By("patching with patch")
		patcher := vw["contract-patcher"]
		Eventually(func() error {
			_, err := patcher.Patch(ctx, "granted-a", types.MergePatchType, label("patcher"), metav1.PatchOptions{})
			return err
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Expect(get(ctx, ws, "granted-a").GetLabels()).To(HaveKeyWithValue("granted", "patcher"))
		Expect(apierrors.IsForbidden(patcher.Delete(ctx, "granted-a", metav1.DeleteOptions{}))).To(BeTrue(), "a patcher's delete")

		By("deleting with delete")
		deleter := vw["contract-deleter"]
		Eventually(func() error {
			return deleter.Delete(ctx, "granted-b", metav1.DeleteOptions{})
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Expect(apierrors.IsNotFound(cli.Cluster(ws).Get(ctx, client.ObjectKey{Namespace: "default", Name: "granted-b"}, widget("", "", nil)))).To(BeTrue())
		_, err = deleter.Patch(ctx, "granted-a", types.MergePatchType, label("deleter"), metav1.PatchOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a deleter's patch: %v", err)

		By("answering 409 to a merge patch with a stale resourceVersion")
		stale := get(ctx, ws, "granted-a").GetResourceVersion()
		_, err = patch(ctx, ws, "default", "granted-a", map[string]any{"metadata": map[string]any{"labels": map[string]any{"bumped": "yes"}}})
		Expect(err).NotTo(HaveOccurred())
		_, err = patcher.Patch(ctx, "granted-a", types.MergePatchType,
			mergePatch(map[string]any{"metadata": map[string]any{"resourceVersion": stale, "labels": map[string]any{"granted": "stale"}}}), metav1.PatchOptions{})
		Expect(apierrors.IsConflict(err)).To(BeTrue(), "a patch with a stale resourceVersion: %v", err)

		By("answering 409 to a merge patch that carries another object's uid: the uid is a precondition")
		other := get(ctx, ws, "granted-c").GetUID()
		_, err = patcher.Patch(ctx, "granted-a", types.MergePatchType,
			mergePatch(map[string]any{"metadata": map[string]any{"uid": other, "labels": map[string]any{"granted": "wrong-uid"}}}), metav1.PatchOptions{})
		Expect(apierrors.IsConflict(err)).To(BeTrue(), "a patch with another object's uid: %v", err)
		Expect(err.Error()).To(ContainSubstring("Precondition failed: UID in precondition"))
		Expect(get(ctx, ws, "granted-a").GetLabels()).To(HaveKeyWithValue("granted", "patcher"))
	})

	// docs/architecture.md#records ("refuses every such write that does not
	// come from the webhook's own user"): the webhook writes records through
	// the virtual workspace.
	It("passes a write through the APIExport virtual workspace to the consumer's admission as the caller's identity, which a match condition on request.userInfo.username sees", func(ctx SpecContext) {
		const ep, others = "vw-identity", "vw-identity-others"
		installValidating(ctx, ep, hook{operations: []admissionregistrationv1.OperationType{create, update}, resources: []string{"widgets"}}, nil)
		// The style of webhookconfig.NotUserCondition, which spares the
		// webhook's own record writes the guard.
		installValidating(ctx, others, hook{operations: []admissionregistrationv1.OperationType{create, update}, resources: []string{"widgets"},
			conditions: []admissionregistrationv1.MatchCondition{{Name: "not-contract-vw", Expression: `request.userInfo.username != "contract-vw"`}}}, nil)
		awaitCalled(ctx, ep, 1, probeCreate)
		awaitCalled(ctx, others, 1, probeCreate)
		vw := vwWidgets(vwUser, consumerClusters[1], "default")

		_, err := vw.Create(ctx, widget("default", "identity", nil), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = vw.Patch(ctx, "identity", types.MergePatchType, mergePatch(map[string]any{"metadata": map[string]any{"labels": map[string]any{"via": "vw"}}}), metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred())

		calls := rec.callsTo(ep, notDry("identity"))
		Expect(byOperation(calls, admissionv1.Create)).NotTo(BeEmpty())
		Expect(byOperation(calls, admissionv1.Update)).NotTo(BeEmpty())
		for _, c := range calls {
			GinkgoWriter.Printf("%s through the virtual workspace arrived as %+v\n", c.Operation, c.User)
			Expect(c.User.Username).To(Equal("contract-vw"), "the %s's user", c.Operation)
		}
		Expect(rec.callsTo(others, notDry("identity"))).To(BeEmpty(), "kcp called the configuration that leaves out contract-vw for its writes")

		By("another user's write is matched")
		_, err = patch(ctx, consumers[1], "default", "identity", map[string]any{"metadata": map[string]any{"labels": map[string]any{"via": "admin"}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(rec.callsTo(others, notDry("identity"))).NotTo(BeEmpty())
	})

	// docs/operations.md#security ("kcp v0.31 does not authenticate to
	// admission webhooks"), which the webhook's --client-ca-file relies on.
	It("presents no client certificate to a webhook", func(ctx SpecContext) {
		const ep = "client-certificate"
		installValidating(ctx, ep, hook{operations: []admissionregistrationv1.OperationType{create}, resources: []string{"widgets"}}, nil)
		awaitCalled(ctx, ep, 1, probeCreate)

		By("seeing the certificate of a client that presents one")
		const selfTest = "self-test"
		certPEM, keyPEM, err := rec.CA.Issue("contract-client")
		Expect(err).NotTo(HaveOccurred())
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		Expect(err).NotTo(HaveOccurred())
		roots := x509.NewCertPool()
		Expect(roots.AppendCertsFromPEM(rec.CABundle)).To(BeTrue())
		httpClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{cert}}}}
		review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"self-test","operation":"CREATE"}}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, rec.endpointURL(selfTest), strings.NewReader(review))
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.Body.Close()).To(Succeed())
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		Expect(rec.callsTo(selfTest, nil)).To(ConsistOf(HaveField("PeerCertificates", 1)))

		By("seeing none on any call of kcp")
		var fromKCP []call
		for _, c := range rec.all() {
			if c.Endpoint != selfTest {
				fromKCP = append(fromKCP, c)
			}
		}
		Expect(fromKCP).NotTo(BeEmpty())
		for _, c := range fromKCP {
			Expect(c.PeerCertificates).To(BeZero(), "kcp presented a client certificate calling %s for %s %s", c.Endpoint, c.Operation, c.objectName())
		}
		GinkgoWriter.Printf("%d calls of kcp, none with a client certificate\n", len(fromKCP))
	})

	// docs/architecture.md#reference-labels ("Who writes them": the
	// labelling MutatingWebhookConfiguration; "A status subresource write
	// changes no labels").
	It("applies a MutatingWebhookConfiguration of an APIExport's workspace to bound objects in consumer workspaces, and discards its label changes on writes through /status", func(ctx SpecContext) {
		const ep = "mutating"
		addLabel := func(c call, key string) []jsonPatchOp {
			if len(c.Object.GetLabels()) == 0 {
				return []jsonPatchOp{{Op: "add", Path: "/metadata/labels", Value: map[string]string{key: "yes"}}}
			}
			return []jsonPatchOp{{Op: "add", Path: "/metadata/labels/" + strings.ReplaceAll(key, "/", "~1"), Value: "yes"}}
		}
		installMutating(ctx, ep, hook{operations: []admissionregistrationv1.OperationType{create, update}, resources: []string{"widgets", "widgets/status"}},
			func(_ context.Context, c call) verdict {
				if !strings.HasPrefix(c.objectName(), "mutated") {
					return allow
				}
				if c.SubResource == "status" {
					return verdict{Allowed: true, Patch: addLabel(c, "contract.test.io/status-mutated")}
				}
				return verdict{Allowed: true, Patch: addLabel(c, "contract.test.io/mutated")}
			})
		awaitCalled(ctx, ep, 1, probeCreate)

		ws := consumers[1]
		Expect(cli.Cluster(ws).Create(ctx, widget("default", "mutated", map[string]string{"own": "label"}))).To(Succeed())
		Expect(get(ctx, ws, "mutated").GetLabels()).To(Equal(map[string]string{"own": "label", "contract.test.io/mutated": "yes"}))

		o := widget("default", "mutated", nil)
		Expect(cli.Cluster(ws).Status().Patch(ctx, o, client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Ready"}}`)))).To(Succeed())
		status := rec.callsTo(ep, func(c call) bool { return c.objectName() == "mutated" && c.SubResource == "status" })
		Expect(status).NotTo(BeEmpty(), "the webhook was called for the status write")
		Expect(status).To(HaveEach(HaveField("Operation", admissionv1.Update)))
		stored := get(ctx, ws, "mutated")
		Expect(stored.Object).To(HaveKeyWithValue("status", map[string]any{"phase": "Ready"}), "the status write took effect")
		Expect(stored.GetLabels()).To(Equal(map[string]string{"own": "label", "contract.test.io/mutated": "yes"}), "the status write kept the labels")
	})

	// docs/architecture.md#workspaces (the claims on webhook
	// configurations) and docs/architecture.md#controller ("A webhook
	// configuration can only be installed in a workspace that binds the
	// APIExport").
	It("lets a user with apiexports/content on an export that claims validating- and mutatingwebhookconfigurations create them, through that export's virtual workspace, in a workspace that binds it and accepted the claims", func(ctx SpecContext) {
		root := core.RootCluster.Path()
		_, depCtrl := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("dep-ctrl"))
		Expect(kcpenv.InstallDependencyAPI(ctx, cli.Cluster(depCtrl))).To(Succeed())
		ws, bound := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("claims"))
		boundCluster := logicalcluster.Name(ws.Spec.Cluster)
		_, err := kcpenv.BindAPIExport(ctx, cli.Cluster(bound), cli.Cluster(depCtrl), depCtrl, kcpenv.DepCtrlExportName)
		Expect(err).NotTo(HaveOccurred())
		grantContent(ctx, depCtrl, "contract-installer", kcpenv.DepCtrlExportName, "get", "list", "watch", "create", "update", "patch", "delete")
		base := endpointURL(ctx, depCtrl, kcpenv.DepCtrlExportName)
		installer, err := kubernetes.NewForConfig(vwConfig(base, addUser("contract-installer"), boundCluster))
		Expect(err).NotTo(HaveOccurred())
		h := hook{operations: []admissionregistrationv1.OperationType{del}, resources: []string{"widgets"}}
		clientConfig := admissionregistrationv1.WebhookClientConfig{URL: ptr.To(rec.endpointURL("claimed")), CABundle: rec.CABundle}
		validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "contract-claimed"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name: "claimed.contract.test.io", ClientConfig: clientConfig, Rules: h.rules(),
				SideEffects: h.sideEffectClass(), AdmissionReviewVersions: []string{"v1"},
			}},
		}
		mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "contract-claimed"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name: "claimed.contract.test.io", ClientConfig: clientConfig, Rules: h.rules(),
				SideEffects: h.sideEffectClass(), AdmissionReviewVersions: []string{"v1"},
			}},
		}

		By("creating both through the virtual workspace")
		Eventually(func() error {
			_, err := installer.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{})
			return err
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		_, err = installer.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(cli.Cluster(bound).Get(ctx, client.ObjectKey{Name: "contract-claimed"}, &admissionregistrationv1.ValidatingWebhookConfiguration{})).To(Succeed())
		Expect(cli.Cluster(bound).Get(ctx, client.ObjectKey{Name: "contract-claimed"}, &admissionregistrationv1.MutatingWebhookConfiguration{})).To(Succeed())

		By("not for a user without the grant")
		stranger, err := kubernetes.NewForConfig(vwConfig(base, vwUser, boundCluster))
		Expect(err).NotTo(HaveOccurred())
		_, err = stranger.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "contract-stranger"}}, metav1.CreateOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a user without apiexports/content: %v", err)

		By("listing and deleting both through the virtual workspace")
		list, err := installer.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Items).To(ContainElement(HaveField("Name", "contract-claimed")))
		Expect(installer.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "contract-claimed", metav1.DeleteOptions{})).To(Succeed())
		Expect(installer.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "contract-claimed", metav1.DeleteOptions{})).To(Succeed())
		err = cli.Cluster(bound).Get(ctx, client.ObjectKey{Name: "contract-claimed"}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the configuration was deleted: %v", err)
	})

	// docs/architecture.md#new-references-to-objects-being-deleted (step 3:
	// a GET of each referenced object, live).
	It("serves a GET without resourceVersion through the APIExport virtual workspace linearizably: it returns the write just made", func(ctx SpecContext) {
		ws, cluster := consumers[1], consumerClusters[1]
		Expect(cli.Cluster(ws).Create(ctx, widget("default", "linear", nil))).To(Succeed())
		vw := vwWidgets(vwUser, cluster, "default")
		for i := range 20 {
			written, err := patch(ctx, ws, "default", "linear", map[string]any{"metadata": map[string]any{"labels": map[string]any{"n": fmt.Sprint(i)}}})
			Expect(err).NotTo(HaveOccurred())
			read, err := vw.Get(ctx, "linear", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(read.GetResourceVersion()).To(Equal(written.GetResourceVersion()), "the GET right after write %d", i)
			Expect(read.GetLabels()).To(HaveKeyWithValue("n", fmt.Sprint(i)))
		}
	})
})
