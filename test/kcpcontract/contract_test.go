package kcpcontract

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
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
	gadgetGVR = schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gadgets"}
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
	operations []admissionregistrationv1.OperationType
	resources  []string
	conditions []admissionregistrationv1.MatchCondition
	// objectSelector, if set, is the object selector of a validating
	// webhook.
	objectSelector *metav1.LabelSelector
	sideEffects    admissionregistrationv1.SideEffectClass
	// ignore fails open: kcp skips the webhook when it cannot be called,
	// or when a match condition errors.
	ignore bool
}

func (h hook) failurePolicy() *admissionregistrationv1.FailurePolicyType {
	if h.ignore {
		return ptr.To(admissionregistrationv1.Ignore)
	}
	return ptr.To(admissionregistrationv1.Fail)
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
		// which serves Widgets and Gadgets (which no spec writes); both
		// consumers bind it and accepted its claim on events.
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

	// validatingWebhook is a webhook of a ValidatingWebhookConfiguration
	// that calls endpoint, failing closed.
	validatingWebhook := func(endpoint string, h hook) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name:                    endpoint + ".contract.test.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(rec.endpointURL(endpoint)), CABundle: rec.CABundle},
			Rules:                   h.rules(),
			MatchConditions:         h.conditions,
			ObjectSelector:          h.objectSelector,
			SideEffects:             h.sideEffectClass(),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           h.failurePolicy(),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			TimeoutSeconds:          ptr.To(int32(10)),
		}
	}
	// installValidating makes responder f answer endpoint and creates a
	// ValidatingWebhookConfiguration for it in the provider's workspace,
	// until the spec ends.
	installValidating := func(ctx context.Context, endpoint string, h hook, f responder) {
		GinkgoHelper()
		unregister := rec.respond(endpoint, f)
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "contract-" + endpoint},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{validatingWebhook(endpoint, h)},
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
				FailurePolicy:           h.failurePolicy(),
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

	// expectAdmittedAgain creates the Widgets <prefix>-plain and
	// <prefix>-finalized (held by a finalizer) in the namespace default of
	// ws and deletes each, where the webhook at endpoint writes the object
	// during the DELETE's first admission (metadata whose key is "true",
	// see written) and refuses its second with answer: kcp must admit the
	// DELETE once on the created state and once on the written one, each
	// in a review of its own, and refuse it with the second answer.
	expectAdmittedAgain := func(ctx context.Context, ws logicalcluster.Path, endpoint, prefix, answer string, written func(*unstructured.Unstructured) map[string]string, key string) {
		GinkgoHelper()
		for _, finalizers := range [][]string{nil, {holdFinalizer}} {
			name := prefix + "-plain"
			if finalizers != nil {
				name = prefix + "-finalized"
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
			Expect(err.Error()).To(ContainSubstring(answer), "the answer on the written state")

			stored := get(ctx, ws, name)
			Expect(written(stored)).To(HaveKeyWithValue(key, "true"))
			Expect(stored.GetDeletionTimestamp()).To(BeNil())
			calls := rec.callsTo(endpoint, notDry(name))
			Expect(calls).To(HaveLen(2), "the DELETE is admitted once on the created and once on the written state")
			Expect(calls[0].OldObject.GetResourceVersion()).To(Equal(created))
			Expect(written(calls[0].OldObject)).NotTo(HaveKey(key))
			Expect(calls[1].OldObject.GetResourceVersion()).To(Equal(stored.GetResourceVersion()))
			Expect(written(calls[1].OldObject)).To(HaveKeyWithValue(key, "true"))
			Expect(calls[1].UID).NotTo(Equal(calls[0].UID), "a review of its own")
		}
	}

	BeforeAll(func(ctx SpecContext) {
		root := core.RootCluster.Path()
		ws, p := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("provider"))
		provider = p
		GinkgoWriter.Printf("provider workspace %s (logical cluster %s)\n", provider, ws.Spec.Cluster)
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(provider), group,
			kcpenv.Resource{Kind: "Widget", Plural: "widgets", Status: true}, kcpenv.Resource{Kind: "Gadget", Plural: "gadgets"})).To(Succeed())
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

	// docs/architecture.md#cleared-objects (the DELETE webhook's object
	// selector on the cleared label).
	It("matches a DELETE webhook's object selector against the labels of the stored object in the consumer workspace: a NotIn selector spares the webhook the DELETE of an object labelled with one of its values, and no other", func(ctx SpecContext) {
		const (
			ep  = "object-selector"
			key = "contract.test.io/cleared"
		)
		installValidating(ctx, ep, hook{
			operations: []admissionregistrationv1.OperationType{create, del},
			resources:  []string{"widgets"},
			objectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: key, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"f1", "f2"},
			}}},
		}, func(_ context.Context, c call) verdict {
			if c.Operation == admissionv1.Delete {
				return deny("contract: refused by the recorder")
			}
			return allow
		})
		ws := consumers[0]
		awaitCalled(ctx, ep, 0, probeCreate)
		for name, labels := range map[string]map[string]string{
			"sel-none":   nil,
			"sel-other":  {key: "f3"},
			"sel-f1":     {key: "f1"},
			"sel-f2":     {key: "f2", "team": "red"},
			"sel-update": nil,
		} {
			Expect(cli.Cluster(ws).Create(ctx, widget("default", name, labels))).To(Succeed())
		}
		for _, name := range []string{"sel-none", "sel-other", "sel-update"} {
			err := cli.Cluster(ws).Delete(ctx, widget("default", name, nil))
			Expect(err).To(MatchError(ContainSubstring("contract: refused by the recorder")), name)
		}
		for _, name := range []string{"sel-f1", "sel-f2"} {
			Expect(cli.Cluster(ws).Delete(ctx, widget("default", name, nil))).To(Succeed(), name)
			Expect(rec.callsTo(ep, func(c call) bool { return c.Operation == admissionv1.Delete && c.objectName() == name })).To(BeEmpty(), name)
		}

		By("labelling an object with a value of the selector: its DELETE is spared the webhook from then on")
		_, err := patch(ctx, ws, "default", "sel-update", map[string]any{"metadata": map[string]any{"labels": map[string]any{key: "f2"}}})
		Expect(err).NotTo(HaveOccurred())
		calls := len(rec.callsTo(ep, notDry("sel-update")))
		Expect(cli.Cluster(ws).Delete(ctx, widget("default", "sel-update", nil))).To(Succeed())
		Expect(rec.callsTo(ep, notDry("sel-update"))).To(HaveLen(calls))
	})

	// docs/operations.md#debugging-a-delete-that-is-blocked (the blockers in
	// the details of a denial, for tools).
	It("passes the status details of a webhook's denial of a DELETE, with their causes, to the client unchanged", func(ctx SpecContext) {
		const ep = "denial-details"
		details := &metav1.StatusDetails{Name: "details-0", Group: "contract.test.io", Kind: "widgets", Causes: []metav1.StatusCause{
			{Type: "dependencies.opendefense.cloud/blocker", Message: `{"kind":"Gadget","namespace":"default","name":"g-1","rule":"p/r","path":".spec.widget"}`, Field: ".spec.widget"},
			{Type: "dependencies.opendefense.cloud/blockers", Message: "1"},
		}}
		installValidating(ctx, ep, hook{operations: []admissionregistrationv1.OperationType{del}, resources: []string{"widgets"}},
			func(_ context.Context, c call) verdict {
				if c.objectName() == "details-0" {
					v := deny("contract: refused with details")
					v.Details = details
					return v
				}
				return allow
			})
		ws := consumers[0]
		awaitCalled(ctx, ep, 0, probeDelete)
		Expect(cli.Cluster(ws).Create(ctx, widget("default", "details-0", nil))).To(Succeed())
		err := cli.Cluster(ws).Delete(ctx, widget("default", "details-0", nil))
		var status apierrors.APIStatus
		Expect(errors.As(err, &status)).To(BeTrue(), "deleting: %v", err)
		Expect(status.Status().Details).NotTo(BeNil())
		Expect(status.Status().Details.Causes).To(Equal(details.Causes))
		Expect(status.Status().Details.Name).To(Equal(details.Name))
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

	// docs/architecture.md#teardown ("Cycles": a workspace's deletion is
	// told by its namespace default being deleted).
	It("refuses to delete a workspace's namespace default while the workspace stays, and deletes it, with the workspace's bound objects, once the workspace is being deleted: a dry-run Event there is then refused with the cause NamespaceTerminating", func(ctx SpecContext) {
		wsObj, ws := envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("doomed"))
		cluster := logicalcluster.Name(wsObj.Spec.Cluster)
		_, err := kcpenv.BindAPIExport(ctx, cli.Cluster(ws), cli.Cluster(provider), provider, group)
		Expect(err).NotTo(HaveOccurred())
		held := widget("default", "held", nil)
		held.SetFinalizers([]string{holdFinalizer})
		Eventually(func() error { return cli.Cluster(ws).Create(ctx, held) }).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Expect(cli.Cluster(ws).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}})).To(Succeed())
		Expect(cli.Cluster(ws).Create(ctx, widget("other", "plain", nil))).To(Succeed())
		byCluster := cli.Cluster(cluster.Path())
		DeferCleanup(func(ctx context.Context) {
			_, err := patch(ctx, cluster.Path(), "default", "held", map[string]any{"metadata": map[string]any{"finalizers": nil}})
			Expect(client.IgnoreNotFound(err)).To(Succeed())
		})
		probeDefault := func() error {
			ev, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&corev1.Event{
				TypeMeta:       metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "contract-probe.", Namespace: "default"},
				InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: "default", Namespace: "default"},
				Reason:         "Probe", Message: "a dry run", Type: corev1.EventTypeNormal,
				Source: corev1.EventSource{Component: "kcp-contract"},
			})
			Expect(err).NotTo(HaveOccurred())
			_, err = resourceIn(vwConfig(vwURL, vwUser, cluster), eventGVR, "default").Create(ctx, &unstructured.Unstructured{Object: ev}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}
		Eventually(probeDefault).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), "a dry-run Event in default of a live workspace")

		By("refusing to delete default while the workspace stays")
		err = cli.Cluster(ws).Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleting the namespace default: %v", err)

		By("deleting the workspace: default is being deleted, and the Widget of the other namespace goes")
		Expect(cli.Cluster(core.RootCluster.Path()).Delete(ctx, wsObj)).To(Succeed())
		terminating := func(err error) bool { return apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) }
		Eventually(probeDefault).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Satisfy(terminating), "a dry-run Event in default of a workspace being deleted")
		Eventually(func() bool {
			return apierrors.IsNotFound(byCluster.Get(ctx, client.ObjectKeyFromObject(widget("other", "plain", nil)), widget("other", "plain", nil)))
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(BeTrue(), "the Widget of the namespace other stayed")
		namespace := &corev1.Namespace{}
		Expect(byCluster.Get(ctx, client.ObjectKey{Name: "default"}, namespace)).To(Succeed())
		Expect(namespace.Status.Phase).To(Equal(corev1.NamespaceTerminating), "the held Widget keeps default terminating")
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

		expectAdmittedAgain(ctx, ws, ep, "replay", "contract: already recorded", (*unstructured.Unstructured).GetLabels, requested)
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

	// internal/objects (List): the clearer lists a protected resource in
	// every workspace with a wildcard LIST through the virtual workspace,
	// in pages.
	It("serves a wildcard LIST through the APIExport virtual workspace in pages, with limit and continue, every object of every consumer workspace once", func(ctx SpecContext) {
		var want []string
		for i, ws := range consumers {
			for j := range 6 {
				name := fmt.Sprintf("paged-%d", j)
				Expect(cli.Cluster(ws).Create(ctx, widget("default", name, nil))).To(Succeed())
				want = append(want, consumerClusters[i].String()+"/"+name)
			}
		}
		all := resourceIn(vwConfig(vwURL, vwUser, logicalcluster.Name("*")), widgetGVR, "")
		var got []string
		pages := 0
		opts := metav1.ListOptions{Limit: 5}
		for {
			list, err := all.List(ctx, opts)
			Expect(err).NotTo(HaveOccurred())
			pages++
			Expect(len(list.Items)).To(BeNumerically("<=", 5), "page %d", pages)
			for _, item := range list.Items {
				got = append(got, logicalcluster.From(&item).String()+"/"+item.GetName())
			}
			if list.GetContinue() == "" {
				break
			}
			opts.Continue = list.GetContinue()
		}
		Expect(pages).To(BeNumerically(">=", 3), "12 objects or more in pages of 5")
		Expect(got).To(ContainElements(want))
		seen := map[string]bool{}
		for _, item := range got {
			Expect(seen[item]).To(BeFalse(), "%s listed twice", item)
			seen[item] = true
		}
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

	// api/v1alpha1.AnnotationAdmittedReferences ("a concurrent DELETE of the
	// object either sees the reference or runs its admission again"): the
	// labelling webhook marks the referenced object while a dependent's
	// CREATE is admitted, possibly while the object's DELETE is being
	// admitted and already allowed.
	It("admits an allowed DELETE again on the new state when the object changed between the admission and the commit, and refuses it when that second call denies", func(ctx SpecContext) {
		const ep = "allowed-deletion"
		const marked = "contract.test.io/marked"
		ws := consumers[1]
		installValidating(ctx, ep, hook{operations: []admissionregistrationv1.OperationType{del}, resources: []string{"widgets"}, sideEffects: admissionregistrationv1.SideEffectClassNoneOnDryRun},
			func(ctx context.Context, c call) verdict {
				if !strings.HasPrefix(c.objectName(), "readmit-") || c.DryRun {
					return allow
				}
				if _, ok := c.OldObject.GetAnnotations()[marked]; ok {
					return deny("contract: marked meanwhile")
				}
				// As the labelling webhook marks an object a dependent
				// references: a merge patch of an annotation, written here
				// before the DELETE is allowed on the unmarked state.
				_, err := patch(ctx, ws, c.OldObject.GetNamespace(), c.OldObject.GetName(), map[string]any{"metadata": map[string]any{
					"annotations": map[string]any{marked: "true"},
				}})
				if err != nil {
					return deny("contract: marking failed: " + err.Error())
				}
				return allow
			})
		awaitCalled(ctx, ep, 1, probeDelete)

		expectAdmittedAgain(ctx, ws, ep, "readmit", "contract: marked meanwhile", (*unstructured.Unstructured).GetAnnotations, marked)
	})

	// docs/architecture.md#the-fast-paths-and-why-each-is-sound and
	// api/v1alpha1.ConditionReferencesTracked (an allowed DELETE without a
	// read once the index is known to be current): the webhook samples a
	// shard's current resourceVersion with a consistent LIST (limit=1) of
	// the wildcard path, and counts on the bookmarks of its short watches to
	// tell when its index passed it, also for types nobody writes.
	It("sends a bookmark through the APIExport virtual workspace before a wildcard watch of a type nobody writes ends, at a resourceVersion no older than that of a consistent LIST made before the watch while other types were written", func(ctx SpecContext) {
		gadgets := resourceIn(vwConfig(vwURL, vwUser, logicalcluster.Name(logicalcluster.Wildcard.String())), gadgetGVR, "")
		revision := func(rv string) int64 {
			GinkgoHelper()
			n, err := strconv.ParseInt(rv, 10, 64)
			Expect(err).NotTo(HaveOccurred())
			return n
		}
		// sample is the resourceVersion of a consistent LIST with limit=1.
		sample := func() string {
			GinkgoHelper()
			list, err := gadgets.List(ctx, metav1.ListOptions{Limit: 1})
			Expect(err).NotTo(HaveOccurred())
			Expect(list.Items).To(BeEmpty(), "nobody writes Gadgets")
			return list.GetResourceVersion()
		}
		writeConfigMaps := func(prefix string) {
			GinkgoHelper()
			for i := range 3 {
				Expect(cli.Cluster(consumers[1]).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", prefix, i)}})).To(Succeed())
			}
		}

		start := sample()
		writeConfigMaps("bookmark-before")
		r := sample()
		Expect(revision(r)).To(BeNumerically(">", revision(start)), "the consistent LIST reports the revision that the ConfigMaps moved")
		writeConfigMaps("bookmark-after")

		// watched is what a watch received.
		type watched struct {
			bookmarks []int64
			at        []time.Duration
			others    []string
			ended     time.Duration
		}
		watchFrom := func(rv string, seconds int64) <-chan watched {
			GinkgoHelper()
			w, err := gadgets.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &seconds})
			Expect(err).NotTo(HaveOccurred())
			began := time.Now()
			out := make(chan watched, 1)
			go func() {
				defer GinkgoRecover()
				var got watched
				for ev := range w.ResultChan() {
					if ev.Type != watch.Bookmark {
						got.others = append(got.others, fmt.Sprintf("%s %v", ev.Type, ev.Object))
						continue
					}
					u, ok := ev.Object.(*unstructured.Unstructured)
					Expect(ok).To(BeTrue(), "a bookmark's object: %T", ev.Object)
					got.bookmarks = append(got.bookmarks, revision(u.GetResourceVersion()))
					got.at = append(got.at, time.Since(began))
				}
				got.ended = time.Since(began)
				out <- got
			}()
			return out
		}
		timeouts := []int64{5, 10}
		watches := make([]<-chan watched, len(timeouts))
		for i, seconds := range timeouts {
			watches[i] = watchFrom(start, seconds)
		}
		// A watch from the resourceVersion the cache is at gets no
		// bookmark while the cache sees nothing newer: the cacher sends
		// none that would not move the watch on.
		current := watchFrom(r, 5)

		for i, seconds := range timeouts {
			var got watched
			Eventually(watches[i]).WithTimeout(time.Duration(seconds+10)*time.Second).Should(Receive(&got), "the watch of %d s did not end", seconds)
			GinkgoWriter.Printf("a watch of %d s from %s: bookmarks %v after %v, ended after %v (LIST: %s)\n", seconds, start, got.bookmarks, got.at, got.ended, r)
			Expect(got.others).To(BeEmpty())
			Expect(got.bookmarks).NotTo(BeEmpty(), "no bookmark before the watch of %d s ended", seconds)
			Expect(got.at[0]).To(BeNumerically("<", got.ended))
			Expect(got.bookmarks).To(HaveEach(BeNumerically(">=", revision(r))), "the bookmarks of the watch of %d s", seconds)
			Expect(got.ended).To(BeNumerically("~", time.Duration(seconds)*time.Second, time.Second), "the watch ends after timeoutSeconds")
		}
		var got watched
		Eventually(current).WithTimeout(15 * time.Second).Should(Receive(&got))
		GinkgoWriter.Printf("a watch of 5 s from %s, where the cache was: bookmarks %v after %v, ended after %v\n", r, got.bookmarks, got.at, got.ended)
	})

	// api/v1alpha1.AnnotationAdmittedReferences: the marks of concurrent
	// dependents are merge patches of different annotation keys of one
	// object, through the protected provider's APIExport virtual
	// workspace. A merge patch with a stale metadata.resourceVersion is a
	// 409 Conflict (see the spec of the grants on apiexports/content).
	It("stores every one of 16 concurrent merge patches of different annotation keys of one object sent to its workspace, while through the APIExport virtual workspace, which retries an update conflict only a few times, each is stored or answered 409 Conflict", func(ctx SpecContext) {
		ws, cluster := consumers[1], consumerClusters[1]
		const concurrent = 16
		Expect(cli.Cluster(ws).Create(ctx, widget("default", "hot", nil))).To(Succeed())
		key := func(via string, i int) string { return fmt.Sprintf("contract.test.io/%s-%d", via, i) }
		// patchAll sends the merge patches of via concurrently with send
		// and returns their errors.
		patchAll := func(via string, send func(patch []byte) error) []error {
			errs := make([]error, concurrent)
			var wg sync.WaitGroup
			for i := range concurrent {
				wg.Go(func() {
					errs[i] = send(mergePatch(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key(via, i): "v"}}}))
				})
			}
			wg.Wait()
			return errs
		}

		By("sending them to the workspace")
		errs := patchAll("direct", func(p []byte) error {
			return cli.Cluster(ws).Patch(ctx, widget("default", "hot", nil), client.RawPatch(types.MergePatchType, p))
		})
		stored := get(ctx, ws, "hot").GetAnnotations()
		for i, err := range errs {
			Expect(err).NotTo(HaveOccurred(), "patch %d", i)
			Expect(stored).To(HaveKey(key("direct", i)))
		}

		By("sending them through the virtual workspace")
		vw := vwWidgets(vwUser, cluster, "default")
		errs = patchAll("vw", func(p []byte) error {
			_, err := vw.Patch(ctx, "hot", types.MergePatchType, p, metav1.PatchOptions{})
			return err
		})
		stored = get(ctx, ws, "hot").GetAnnotations()
		conflicts := 0
		for i, err := range errs {
			if err != nil {
				Expect(apierrors.IsConflict(err)).To(BeTrue(), "patch %d through the virtual workspace: %v", i, err)
				Expect(stored).NotTo(HaveKey(key("vw", i)), "patch %d was answered 409 and stored", i)
				conflicts++
				continue
			}
			Expect(stored).To(HaveKey(key("vw", i)), "patch %d was answered with success and not stored", i)
		}
		GinkgoWriter.Printf("%d of %d concurrent merge patches through the virtual workspace were answered 409 Conflict\n", conflicts, concurrent)
	})

	// api/v1alpha1.ConditionReferencesTracked ("the dependents are
	// labelled"): each replica probes with a dry-run PATCH of one dependent,
	// through the virtual workspace, that the labelling webhook with the
	// current scheme runs.
	It("runs a MutatingWebhookConfiguration of an APIExport's workspace on a dry-run merge PATCH through the virtual workspace, with dryRun in the review, and answers with the mutated object while storing nothing", func(ctx SpecContext) {
		const ep = "dry-run-patch"
		const scheme = "contract.test.io/scheme"
		installMutating(ctx, ep, hook{operations: []admissionregistrationv1.OperationType{update}, resources: []string{"widgets"}},
			func(_ context.Context, c call) verdict {
				if c.objectName() != "dry-patched" {
					return allow
				}
				return verdict{Allowed: true, Patch: []jsonPatchOp{{Op: "replace", Path: "/metadata/labels/contract.test.io~1scheme", Value: "mutated-" + c.Object.GetLabels()[scheme]}}}
			})
		awaitCalled(ctx, ep, 1, func(ctx context.Context, i int) error {
			return cli.Cluster(consumers[i]).Patch(ctx, widget("default", "probe", nil), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"probed":"yes"}}}`)), client.DryRunAll)
		})

		ws, cluster := consumers[1], consumerClusters[1]
		created := widget("default", "dry-patched", map[string]string{scheme: "stored"})
		Expect(cli.Cluster(ws).Create(ctx, created)).To(Succeed())
		answer, err := vwWidgets(vwUser, cluster, "default").Patch(ctx, "dry-patched", types.MergePatchType,
			mergePatch(map[string]any{"metadata": map[string]any{"labels": map[string]any{scheme: "probe"}}}), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		Expect(err).NotTo(HaveOccurred())
		Expect(answer.GetLabels()).To(HaveKeyWithValue(scheme, "mutated-probe"), "the answer is the mutated object")

		stored := get(ctx, ws, "dry-patched")
		Expect(stored.GetLabels()).To(HaveKeyWithValue(scheme, "stored"))
		Expect(stored.GetResourceVersion()).To(Equal(created.GetResourceVersion()), "nothing was stored")
		calls := rec.callsTo(ep, func(c call) bool { return c.objectName() == "dry-patched" })
		Expect(calls).NotTo(BeEmpty())
		for _, c := range calls {
			Expect(c.Operation).To(Equal(admissionv1.Update))
			Expect(c.DryRun).To(BeTrue(), "the review of the dry run")
			Expect(c.User.Username).To(Equal("contract-vw"))
			Expect(c.Object.GetLabels()).To(HaveKeyWithValue(scheme, "probe"), "the webhook sees the patched object")
		}
	})

	// api/v1alpha1.ConditionReferencesTracked ("naming the missing grant
	// (patch on the protected provider's APIExport content)"): the elected
	// replica asks with a SelfSubjectAccessReview in the provider's
	// workspace whether it may write marks there.
	It("answers a SelfSubjectAccessReview in the provider's workspace on patch of apiexports/content of the export as the APIExport virtual workspace decides a merge patch, for a user with the workspace's access verb; without that verb a user may neither ask nor patch", func(ctx SpecContext) {
		ws, cluster := consumers[1], consumerClusters[1]
		Expect(cli.Cluster(ws).Create(ctx, widget("default", "reviewed", nil))).To(Succeed())
		// reviewer returns whether user may verb the content of export,
		// by a SelfSubjectAccessReview in the provider's workspace, and
		// whether a merge patch through the virtual workspace succeeds.
		type access struct {
			reviewErr error
			allowed   bool
			patchErr  error
		}
		reviewer := func(user *rest.Config) func(verb, export string) access {
			inProvider := rest.CopyConfig(user)
			inProvider.Host += provider.RequestPath()
			kube, err := kubernetes.NewForConfig(inProvider)
			Expect(err).NotTo(HaveOccurred())
			vw := vwWidgets(user, cluster, "default")
			return func(verb, export string) access {
				var a access
				review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
					Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
						Group: "apis.kcp.io", Resource: "apiexports", Subresource: "content", Name: export, Verb: verb,
					}},
				}, metav1.CreateOptions{})
				a.reviewErr = err
				if err == nil {
					a.allowed = review.Status.Allowed
				}
				_, a.patchErr = vw.Patch(ctx, "reviewed", types.MergePatchType, mergePatch(map[string]any{"metadata": map[string]any{"labels": map[string]any{"reviewed": "yes"}}}), metav1.PatchOptions{})
				return a
			}
		}

		const user = "contract-reviewer"
		grantContent(ctx, provider, user, group, "get")
		review := reviewer(addUser(user))
		By("not allowed without patch")
		Eventually(func(g Gomega) {
			a := review("get", group)
			g.Expect(a.reviewErr).NotTo(HaveOccurred())
			g.Expect(a.allowed).To(BeTrue())
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), "the grant of get never took effect")
		a := review("patch", group)
		Expect(a.reviewErr).NotTo(HaveOccurred())
		Expect(a.allowed).To(BeFalse())
		Expect(apierrors.IsForbidden(a.patchErr)).To(BeTrue(), "the merge patch: %v", a.patchErr)

		By("allowed with patch")
		// kcp may write the role meanwhile (a conflict): read it again.
		Eventually(func() error {
			role := &rbacv1.ClusterRole{}
			if err := cli.Cluster(provider).Get(ctx, client.ObjectKey{Name: user + "-" + group}, role); err != nil {
				return err
			}
			role.Rules[1].Verbs = append(role.Rules[1].Verbs, "patch")
			return cli.Cluster(provider).Update(ctx, role)
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Eventually(func(g Gomega) {
			a := review("patch", group)
			g.Expect(a.reviewErr).NotTo(HaveOccurred())
			g.Expect(a.allowed).To(BeTrue())
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), "the grant of patch never took effect")
		Expect(review("patch", group).patchErr).NotTo(HaveOccurred())
		Expect(review("patch", "other.contract.test.io").allowed).To(BeFalse(), "the grant names the export")

		By("neither asking nor patching without the workspace's access verb")
		const stranger = "contract-reviewer-stranger"
		Expect(cli.Cluster(provider).Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: stranger}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apis.kcp.io"}, Resources: []string{"apiexports/content"}, ResourceNames: []string{group}, Verbs: []string{"get", "patch"}},
		}})).To(Succeed())
		Expect(cli.Cluster(provider).Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: stranger},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: stranger},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: stranger}},
		})).To(Succeed())
		a = reviewer(addUser(stranger))("patch", group)
		Expect(apierrors.IsForbidden(a.reviewErr)).To(BeTrue(), "the review: %v", a.reviewErr)
		Expect(apierrors.IsForbidden(a.patchErr)).To(BeTrue(), "the merge patch: %v", a.patchErr)
	})

	// api/v1alpha1.AnnotationAdmittedReferences ("Only the webhook may
	// change it") and docs/architecture.md#reference-labels: the guard's and
	// the labelling webhook's match conditions test an annotation or label
	// of objects whose annotations and labels may be absent, empty or null,
	// and of the missing object of a CREATE's oldObject and a DELETE's
	// object.
	It("evaluates match conditions with optional field selection on annotations and labels without error, whatever their shape (absent, {}, null, no object on DELETE, no oldObject on CREATE), while a plain `in` on null annotations or has() on a DELETE's object errors and refuses the write", func(ctx SpecContext) {
		const key = "contract.test.io/k"
		// The robust expressions: annotation or label key is set on the
		// object, and it differs between object and oldObject (set, changed
		// or removed), with CEL's optional field selection, and without.
		set := func(field string) string {
			return fmt.Sprintf(`object.?metadata.?%s[?%q].hasValue()`, field, key)
		}
		differs := func(field string) string {
			return fmt.Sprintf(`object.?metadata.?%[1]s[?%[2]q] != oldObject.?metadata.?%[1]s[?%[2]q]`, field, key)
		}
		in := func(obj, field string) string {
			return fmt.Sprintf(`%[1]s != null && has(%[1]s.metadata.%[2]s) && %[1]s.metadata.%[2]s != null && %[3]q in %[1]s.metadata.%[2]s`, obj, field, key)
		}
		setPlain := func(field string) string { return in("object", field) }
		differsPlain := func(field string) string {
			return fmt.Sprintf(`(%[1]s) != (%[2]s) || (%[1]s) && object.metadata.%[3]s[%[4]q] != oldObject.metadata.%[3]s[%[4]q]`, in("object", field), in("oldObject", field), field, key)
		}
		type condition struct {
			field, test, expression string
		}
		var conditions []condition
		for _, field := range []string{"annotations", "labels"} {
			conditions = append(conditions,
				condition{field, "set", set(field)}, condition{field, "differs", differs(field)},
				condition{field, "set-plain", setPlain(field)}, condition{field, "differs-plain", differsPlain(field)})
		}
		endpoint := func(c condition) string { return "shapes-" + c.field + "-" + c.test }
		const seen = "shapes-seen"
		h := hook{operations: []admissionregistrationv1.OperationType{create, update, del}, resources: []string{"widgets"}}
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "contract-shapes"},
			// seen has no condition: it records the object every webhook
			// saw.
			Webhooks: []admissionregistrationv1.ValidatingWebhook{validatingWebhook(seen, h)},
		}
		for _, c := range conditions {
			ch := h
			ch.conditions = []admissionregistrationv1.MatchCondition{{Name: c.field + "-" + c.test, Expression: c.expression}}
			cfg.Webhooks = append(cfg.Webhooks, validatingWebhook(endpoint(c), ch))
		}
		Expect(cli.Cluster(provider).Create(ctx, cfg)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(cli.Cluster(provider).Delete(ctx, cfg))).To(Succeed())
		})
		// A mutating webhook gives the shapes that no client write gives:
		// kcp drops empty and null annotations and labels of a request.
		shapes := map[string]jsonPatchOp{
			"annotations-null":  {Op: "add", Path: "/metadata/annotations", Value: json.RawMessage("null")},
			"annotations-empty": {Op: "add", Path: "/metadata/annotations", Value: map[string]any{}},
			"labels-null":       {Op: "add", Path: "/metadata/labels", Value: json.RawMessage("null")},
			"labels-empty":      {Op: "add", Path: "/metadata/labels", Value: map[string]any{}},
		}
		installMutating(ctx, "shapes-mutating", hook{operations: []admissionregistrationv1.OperationType{create, update}, resources: []string{"widgets"}},
			func(_ context.Context, c call) verdict {
				shape, _, _ := unstructured.NestedString(c.Object.Object, "spec", "shape")
				if op, ok := shapes[shape]; ok {
					return verdict{Allowed: true, Patch: []jsonPatchOp{op}}
				}
				return allow
			})
		awaitCalled(ctx, "shapes-mutating", 0, probeCreate)
		awaitCalled(ctx, seen, 0, probeCreate)

		ws := consumers[0]
		// shapeOf is the shape of field in the metadata of o.
		shapeOf := func(o *unstructured.Unstructured, field string) string {
			if o == nil {
				return "no object"
			}
			v, ok := o.Object["metadata"].(map[string]any)[field]
			switch m, isMap := v.(map[string]any); {
			case !ok:
				return "absent"
			case v == nil:
				return "null"
			case isMap && len(m) == 0:
				return "{}"
			case isMap && m[key] != nil:
				return "with the key"
			default:
				return "without the key"
			}
		}
		// want is whether each test of annotations and of labels is true.
		type want struct{ annotationSet, annotationDiffers, labelSet, labelDiffers bool }
		// step makes write to the Widget name and checks that it was
		// admitted, that the webhooks saw the object's annotations and labels
		// in the shapes given (unless ""), and that kcp called exactly the
		// webhooks whose condition holds. kcp may admit an UPDATE or DELETE
		// more than once (see the package's doc); only the calls on the
		// stored state count.
		step := func(what, name, annotations, labels string, w want, write func() error) {
			GinkgoHelper()
			prior := widget("default", name, nil)
			if err := cli.Cluster(ws).Get(ctx, client.ObjectKeyFromObject(prior), prior); err != nil {
				Expect(apierrors.IsNotFound(err)).To(BeTrue(), "reading %s: %v", name, err)
			}
			before := len(rec.all())
			Expect(write()).To(Succeed(), "%s was refused", what)
			var calls, saw []call
			for _, c := range rec.all()[before:] {
				if c.DryRun || c.objectName() != name || c.OldObject != nil && c.OldObject.GetResourceVersion() != prior.GetResourceVersion() {
					continue
				}
				calls = append(calls, c)
				if c.Endpoint == seen {
					saw = append(saw, c)
				}
			}
			Expect(saw).NotTo(BeEmpty(), "%s: kcp called no webhook on the stored state", what)
			last := saw[len(saw)-1]
			GinkgoWriter.Printf("%s: %s; annotations %s (oldObject: %s), labels %s (oldObject: %s)\n", what, last.Operation,
				shapeOf(last.Object, "annotations"), shapeOf(last.OldObject, "annotations"), shapeOf(last.Object, "labels"), shapeOf(last.OldObject, "labels"))
			if annotations != "" {
				Expect(shapeOf(last.Object, "annotations")).To(Equal(annotations), "%s: the object's annotations", what)
			}
			if labels != "" {
				Expect(shapeOf(last.Object, "labels")).To(Equal(labels), "%s: the object's labels", what)
			}
			expected := map[string]bool{
				"annotations-set": w.annotationSet, "annotations-differs": w.annotationDiffers,
				"labels-set": w.labelSet, "labels-differs": w.labelDiffers,
			}
			for _, c := range conditions {
				called := false
				for _, call := range calls {
					called = called || call.Endpoint == endpoint(c)
				}
				Expect(called).To(Equal(expected[c.field+"-"+strings.TrimSuffix(c.test, "-plain")]), "%s: whether kcp called the webhook %s: %s", what, endpoint(c), c.expression)
			}
		}
		// reshape is a merge patch p of the Widget "shapes" whose
		// spec.shape makes the mutating webhook give that shape.
		reshape := func(p map[string]any, shape string) func() error {
			return func() error {
				p["spec"] = map[string]any{"shape": nil}
				if shape != "" {
					p["spec"] = map[string]any{"shape": shape}
				}
				_, err := patch(ctx, ws, "default", "shapes", p)
				return err
			}
		}
		// keyed sets the key to value in the metadata fields.
		keyed := func(value string, fields ...string) map[string]any {
			meta := map[string]any{}
			for _, f := range fields {
				meta[f] = map[string]any{key: value}
			}
			return map[string]any{"metadata": meta}
		}
		all, neither := want{true, true, true, true}, want{}

		step("a CREATE without the key or labels", "shapes-bare", "without the key", "absent", neither, func() error {
			return cli.Cluster(ws).Create(ctx, widget("default", "shapes-bare", nil))
		})
		step("a CREATE with the key", "shapes", "with the key", "with the key", all, func() error {
			o := widget("default", "shapes", map[string]string{key: "1"})
			o.SetAnnotations(map[string]string{key: "1"})
			return cli.Cluster(ws).Create(ctx, o)
		})
		step("changing the key", "shapes", "with the key", "with the key", all, reshape(keyed("2", "annotations", "labels"), ""))
		step("another annotation", "shapes", "with the key", "with the key", want{true, false, true, false},
			reshape(map[string]any{"metadata": map[string]any{"annotations": map[string]any{"other": "1"}}}, ""))
		step("null annotations", "shapes", "null", "with the key", want{false, true, true, false}, reshape(map[string]any{}, "annotations-null"))
		step("setting the annotation again", "shapes", "with the key", "with the key", want{true, true, true, false}, reshape(keyed("1", "annotations"), ""))
		step("empty annotations", "shapes", "{}", "with the key", want{false, true, true, false}, reshape(map[string]any{}, "annotations-empty"))
		step("setting the annotation again", "shapes", "with the key", "with the key", want{true, true, true, false}, reshape(keyed("1", "annotations"), ""))
		step("empty labels", "shapes", "with the key", "{}", want{true, false, false, true}, reshape(map[string]any{}, "labels-empty"))
		step("setting the label again", "shapes", "with the key", "with the key", want{true, false, true, true}, reshape(keyed("1", "labels"), ""))
		// kcp sets the labels again after the mutating webhooks (its
		// permission claims labeller), which drops null ones; whatever
		// their shape, they lack the key.
		step("null labels", "shapes", "with the key", "", want{true, false, false, true}, reshape(map[string]any{}, "labels-null"))
		step("setting the label again", "shapes", "with the key", "with the key", want{true, false, true, true}, reshape(keyed("1", "labels"), ""))
		step("an UPDATE without annotations and labels", "shapes", "absent", "absent", want{false, true, false, true}, func() error {
			o := get(ctx, ws, "shapes")
			unstructured.RemoveNestedField(o.Object, "metadata", "annotations")
			unstructured.RemoveNestedField(o.Object, "metadata", "labels")
			return cli.Cluster(ws).Update(ctx, o)
		})
		step("setting both again", "shapes", "with the key", "with the key", all, reshape(keyed("1", "annotations", "labels"), ""))
		step("a DELETE with the key", "shapes", "no object", "no object", want{false, true, false, true}, func() error {
			return cli.Cluster(ws).Delete(ctx, widget("default", "shapes", nil))
		})
		step("a DELETE without the key", "shapes-bare", "no object", "no object", neither, func() error {
			return cli.Cluster(ws).Delete(ctx, widget("default", "shapes-bare", nil))
		})

		By("refusing the writes on which a plain `in` or has() errors, naming the expression")
		const naive = "shapes-naive"
		// Deleted once the configuration that refuses it is gone (cleanups
		// run in reverse order), which takes effect a moment later.
		DeferCleanup(func(ctx context.Context) {
			Eventually(func() error {
				return client.IgnoreNotFound(cli.Cluster(ws).Delete(ctx, widget("default", naive, nil)))
			}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		})
		naiveSet := fmt.Sprintf(`has(object.metadata.annotations) && %q in object.metadata.annotations`, key)
		installValidating(ctx, naive, hook{operations: []admissionregistrationv1.OperationType{create, update, del}, resources: []string{"widgets"}, conditions: []admissionregistrationv1.MatchCondition{
			{Name: "this-spec", Expression: `(object == null ? oldObject : object).metadata.name in ["probe-create", "shapes-naive"]`},
			{Name: "annotation-set", Expression: naiveSet},
		}}, nil)
		awaitCalled(ctx, naive, 0, func(ctx context.Context, i int) error {
			o := widget("default", "probe-create", nil)
			o.SetAnnotations(map[string]string{key: "1"})
			return cli.Cluster(consumers[i]).Create(ctx, o, client.DryRunAll)
		})
		Expect(cli.Cluster(ws).Create(ctx, widget("default", naive, nil))).To(Succeed())
		// The error names the expression, neither the condition nor the
		// webhook.
		refused := fmt.Sprintf("expression '%s' resulted in error", naiveSet)
		_, err := patch(ctx, ws, "default", naive, map[string]any{"spec": map[string]any{"shape": "annotations-null"}})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "an UPDATE to null annotations: %v", err)
		Expect(err.Error()).To(ContainSubstring(refused))
		GinkgoWriter.Printf("an UPDATE to null annotations: %v\n", err)
		err = cli.Cluster(ws).Delete(ctx, widget("default", naive, nil))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a DELETE: %v", err)
		Expect(err.Error()).To(ContainSubstring(refused))
		GinkgoWriter.Printf("a DELETE: %v\n", err)
		Expect(get(ctx, ws, naive).GetDeletionTimestamp()).To(BeNil())
		Expect(rec.callsTo(naive, notDry(naive))).To(BeEmpty())
	})

	// docs/architecture.md#reference-labels and #records: what a
	// server-side apply leaves of labels and annotations reaches the
	// mutating webhooks (the labelling webhook, the guards of the ledger
	// and of skip-protection) as it is, null included; a match condition
	// that iterates over them must hold on null.
	It("passes null labels to the mutating webhooks when a server-side apply applies labels null or {}, where orValue({}) is null and iterating over it errors, while optFlatMap(m, optional.ofNonZeroValue(m)).orValue({}) holds; an UPDATE's object carries the kcp.io/cluster of the request, none or another, its old object the workspace's", func(ctx SpecContext) {
		const (
			seen, orValue, flatMap = "ssa-seen", "ssa-orvalue", "ssa-flatmap"
			name                   = "ssa"
			manager, other         = "contract-gitops", "contract-other"
		)
		ws := consumers[0]
		all := func(expr string) string {
			return fmt.Sprintf(`(%[1]s).all(k, true) && (%[2]s).all(k, true)`, fmt.Sprintf(expr, "labels"), fmt.Sprintf(expr, "annotations"))
		}
		onWidgets := func(condition string) hook {
			h := hook{operations: []admissionregistrationv1.OperationType{create, update}, resources: []string{"widgets"}, ignore: true}
			if condition != "" {
				h.conditions = []admissionregistrationv1.MatchCondition{
					{Name: "this-spec", Expression: `object.metadata.name in ["probe-create", "ssa"]`},
					{Name: "iterates", Expression: condition},
				}
			}
			return h
		}
		// Failing open, kcp calls a webhook whose condition errors not at
		// all: whether it was called tells whether the condition held.
		installMutating(ctx, orValue, onWidgets(all(`object.?metadata.?%s.orValue({})`)), func(context.Context, call) verdict { return allow })
		installMutating(ctx, flatMap, onWidgets(all(`object.?metadata.?%s.optFlatMap(m, optional.ofNonZeroValue(m)).orValue({})`)), func(context.Context, call) verdict { return allow })
		installMutating(ctx, seen, onWidgets(""), func(context.Context, call) verdict { return allow })
		for _, ep := range []string{orValue, flatMap, seen} {
			awaitCalled(ctx, ep, 0, probeCreate)
		}
		shapeOf := func(o *unstructured.Unstructured, field string) string {
			v, ok := o.Object["metadata"].(map[string]any)[field]
			switch m, isMap := v.(map[string]any); {
			case !ok:
				return "absent"
			case v == nil:
				return "null"
			case isMap && len(m) == 0:
				return "{}"
			default:
				keys := make([]string, 0, len(m))
				for k := range m {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				return strings.Join(keys, ",")
			}
		}
		// apply server-side applies the Widget with metadata meta as
		// fieldManager.
		apply := func(fieldManager string, meta map[string]any) func() error {
			return func() error {
				meta["name"], meta["namespace"] = name, "default"
				body := mergePatch(map[string]any{"apiVersion": widgetGVR.GroupVersion().String(), "kind": "Widget", "metadata": meta, "spec": map[string]any{"size": 1}})
				return cli.Cluster(ws).Patch(ctx, widget("default", name, nil), client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(fieldManager), client.ForceOwnership)
			}
		}
		// step makes write and checks what the mutating webhooks saw on
		// the stored state: the shapes of labels and annotations (unless
		// ""), and that the orValue condition errored exactly on null.
		step := func(what, labels, annotations string, write func() error) {
			GinkgoHelper()
			prior := widget("default", name, nil)
			if err := cli.Cluster(ws).Get(ctx, client.ObjectKeyFromObject(prior), prior); err != nil {
				Expect(apierrors.IsNotFound(err)).To(BeTrue(), "reading %s: %v", name, err)
			}
			before := len(rec.all())
			Expect(write()).To(Succeed(), "%s was refused", what)
			called := map[string]bool{}
			var saw *call
			for _, c := range rec.all()[before:] {
				if c.DryRun || c.objectName() != name || c.OldObject != nil && c.OldObject.GetResourceVersion() != prior.GetResourceVersion() {
					continue
				}
				called[c.Endpoint] = true
				if c.Endpoint == seen {
					saw = &c
				}
			}
			Expect(saw).NotTo(BeNil(), "%s: kcp called no mutating webhook on the stored state", what)
			gotLabels, gotAnnotations := shapeOf(saw.Object, "labels"), shapeOf(saw.Object, "annotations")
			GinkgoWriter.Printf("%s: %s; labels %s, annotations %s; orValue held: %v, optFlatMap held: %v\n", what, saw.Operation, gotLabels, gotAnnotations, called[orValue], called[flatMap])
			if labels != "" {
				Expect(gotLabels).To(Equal(labels), "%s: the labels the mutating webhooks saw", what)
			}
			if annotations != "" {
				Expect(gotAnnotations).To(Equal(annotations), "%s: the annotations the mutating webhooks saw", what)
			}
			if saw.OldObject != nil {
				Expect(saw.OldObject.GetAnnotations()).To(HaveKeyWithValue(logicalcluster.AnnotationKey, consumerClusters[0].String()), "%s: the old object's workspace", what)
			}
			Expect(called[flatMap]).To(BeTrue(), "%s: optFlatMap(m, optional.ofNonZeroValue(m)).orValue({}) errored", what)
			Expect(called[orValue]).To(Equal(gotLabels != "null" && gotAnnotations != "null"), "%s: orValue({}) errors exactly on null", what)
		}
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(cli.Cluster(ws).Delete(ctx, widget("default", name, nil)))).To(Succeed())
		})
		team := func() map[string]any {
			return map[string]any{"labels": map[string]any{"team": "blue"}, "annotations": map[string]any{"note": "x"}}
		}
		// Annotations applied null or {} reach them holding only
		// kcp.io/cluster; dropped, absent.
		const cluster = logicalcluster.AnnotationKey
		const noted = cluster + ",note"
		step("applying labels and annotations", "team", noted, apply(manager, team()))
		step("applying without them: the manager drops its only ones", "absent", "absent", apply(manager, map[string]any{}))
		step("applying them again", "team", noted, apply(manager, team()))
		step("applying them as null", "null", cluster, apply(manager, map[string]any{"labels": nil, "annotations": nil}))
		step("applying them again", "team", noted, apply(manager, team()))
		step("applying them as {}", "null", cluster, apply(manager, map[string]any{"labels": map[string]any{}, "annotations": map[string]any{}}))
		step("applying them again", "team", noted, apply(manager, team()))
		step("another manager applying the same keys", "team", noted, apply(other, team()))
		step("the first manager dropping them, the other still owning them", "team", noted, apply(manager, map[string]any{}))
		step("the other manager dropping them too", "absent", "absent", apply(other, map[string]any{}))
		step("applying them again", "team", noted, apply(manager, team()))
		step("a merge patch of null labels and annotations", "absent", "absent", func() error {
			_, err := patch(ctx, ws, "default", name, map[string]any{"metadata": map[string]any{"labels": nil, "annotations": nil}})
			return err
		})

		By("a merge patch that changes kcp.io/cluster: the webhooks see the request's value, the old object the workspace's, which stays")
		before := len(rec.all())
		_, err := patch(ctx, ws, "default", name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{cluster: "forged"}}})
		Expect(err).NotTo(HaveOccurred())
		var forged []call
		for _, c := range rec.all()[before:] {
			if c.Endpoint == seen && !c.DryRun && c.objectName() == name {
				forged = append(forged, c)
			}
		}
		Expect(forged).NotTo(BeEmpty())
		for _, c := range forged {
			Expect(c.Object.GetAnnotations()).To(HaveKeyWithValue(cluster, "forged"))
			Expect(c.OldObject.GetAnnotations()).To(HaveKeyWithValue(cluster, consumerClusters[0].String()))
		}
		Expect(get(ctx, ws, name).GetAnnotations()).To(HaveKeyWithValue(cluster, consumerClusters[0].String()))
	})

	// docs/operations.md#skip-protection-and-the-audit-trail: the webhook
	// asks kcp, through the protected provider's APIExport virtual
	// workspace, whether the user who sets skip-protection may delete the
	// object.
	It("answers a SubjectAccessReview in a consumer workspace through the APIExport virtual workspace of an export whose claim on subjectaccessreviews the workspace accepted, as the workspace authorizes the user it names; without the accepted claim it refuses", func(ctx SpecContext) {
		const deleter, updater = "contract-sar-deleter", "contract-sar-updater"
		ws, cluster := consumers[0], consumerClusters[0]
		for user, verbs := range map[string][]string{deleter: {"get", "update", "delete"}, updater: {"get", "update", "patch"}} {
			Expect(cli.Cluster(ws).Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
				{NonResourceURLs: []string{"/"}, Verbs: []string{"access"}},
				{APIGroups: []string{group}, Resources: []string{"widgets"}, Verbs: verbs},
			}})).To(Succeed())
			Expect(cli.Cluster(ws).Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: user},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
			})).To(Succeed())
		}
		// review asks, as the user that may create through the virtual
		// workspace, whether user may delete the Widget probe in cluster.
		review := func(cluster logicalcluster.Name, user string, groups ...string) (*authorizationv1.SubjectAccessReview, error) {
			kube, err := kubernetes.NewForConfig(vwConfig(vwURL, vwUser, cluster))
			Expect(err).NotTo(HaveOccurred())
			return kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Verb: "delete", Group: group, Version: "v1", Resource: "widgets", Name: "probe"},
			}}, metav1.CreateOptions{})
		}
		By("a user who may delete Widgets, and one who may only update them")
		Eventually(func(g Gomega) {
			r, err := review(cluster, deleter, "system:authenticated")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Status.Allowed).To(BeTrue(), "%+v", r.Status)
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), "the deleter's grant never took effect")
		r, err := review(cluster, updater, "system:authenticated")
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Status.Allowed).To(BeFalse(), "%+v", r.Status)
		GinkgoWriter.Printf("the updater: %+v\n", r.Status)
		r, err = review(cluster, "contract-sar-stranger", "system:authenticated")
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Status.Allowed).To(BeFalse(), "a user without the workspace's access verb: %+v", r.Status)

		By("a workspace that bound the export without accepting the claim")
		fixture, other := envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("consumer"))
		binding, err := kcpenv.BindAPIExport(ctx, cli.Cluster(other), cli.Cluster(provider), provider, group)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error {
			if err := cli.Cluster(other).Get(ctx, client.ObjectKeyFromObject(binding), binding); err != nil {
				return err
			}
			var kept []apisv1alpha2.AcceptablePermissionClaim
			for _, c := range binding.Spec.PermissionClaims {
				if c.Resource != "subjectaccessreviews" {
					kept = append(kept, c)
				}
			}
			binding.Spec.PermissionClaims = kept
			return cli.Cluster(other).Update(ctx, binding)
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Eventually(func(g Gomega) {
			_, err := review(logicalcluster.Name(fixture.Spec.Cluster), deleter, "system:authenticated")
			g.Expect(err).To(HaveOccurred())
			GinkgoWriter.Printf("without the accepted claim: %v\n", err)
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	// docs/architecture.md ("A 403 of every shard"): the webhook tells a
	// workspace that does not bind a protected type's export from a
	// provider's missing grant by the export's bindings.
	It("refuses alike, with 403 and no reason, a request through the APIExport virtual workspace for a workspace that does not bind the export and one by a user without the grant, and lists the export's bindings of every workspace, and only those, in a wildcard LIST to a user with list on its content, which it refuses to one without", func(ctx SpecContext) {
		unbound, _ := envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("unbound"))
		unboundCluster := logicalcluster.Name(unbound.Spec.Cluster)
		stranger := addUser("contract-stranger")

		By("refusing a workspace that binds no export, to the granted user")
		_, notBound := vwWidgets(vwUser, unboundCluster, "default").Get(ctx, "probe", metav1.GetOptions{})
		Expect(apierrors.IsForbidden(notBound)).To(BeTrue(), "a workspace that does not bind the export: %v", notBound)
		By("refusing a bound workspace to a user without the grant")
		_, noGrant := vwWidgets(stranger, consumerClusters[0], "default").Get(ctx, "probe", metav1.GetOptions{})
		Expect(apierrors.IsForbidden(noGrant)).To(BeTrue(), "a user without the grant: %v", noGrant)
		GinkgoWriter.Printf("not bound: %v\nno grant: %v\n", notBound, noGrant)
		for _, err := range []error{notBound, noGrant} {
			Expect(err.Error()).To(HaveSuffix("access denied"), "kcp gives no reason that tells the two apart")
		}

		By("listing the bindings of the export, in every workspace, to the granted user")
		apiBindingsGVR := apisv1alpha2.SchemeGroupVersion.WithResource("apibindings")
		wildcard := logicalcluster.Name(logicalcluster.Wildcard.String())
		list, err := resourceIn(vwConfig(vwURL, vwUser, wildcard), apiBindingsGVR, "").List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		var bound []string
		for _, item := range list.Items {
			export, _, _ := unstructured.NestedString(item.Object, "spec", "reference", "export", "name")
			Expect(export).To(Equal(group), "a binding of another export: %s", item.GetName())
			bound = append(bound, item.GetAnnotations()[logicalcluster.AnnotationKey])
		}
		Expect(bound).To(ContainElements(consumerClusters[0].String(), consumerClusters[1].String()))
		Expect(bound).NotTo(ContainElement(unboundCluster.String()))

		By("refusing the LIST to a user without the grant")
		_, err = resourceIn(vwConfig(vwURL, stranger, wildcard), apiBindingsGVR, "").List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a user without the grant: %v", err)
	})
})
