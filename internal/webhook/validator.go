package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/buger/jsonparser"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/dependents"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

// Audit annotation keys. kcp prefixes them with the webhook's name.
const (
	AuditDecision          = "decision"
	AuditBlockers          = "blockers"
	AuditSkipProtectionBy  = "skip-protection-user"
	AuditFailedRule        = "failed-rule"
	decisionDenied         = "denied"
	decisionBypassed       = "bypassed"
	decisionError          = "error"
	defaultMaxBlockersName = 10
)

// RuleFinder finds the rules protecting a resource; *registry.Registry
// implements it.
type RuleFinder interface {
	FindByTargetGVR(gvr schema.GroupVersionResource) []registry.Entry
}

// Gate tells whether the rule registry is complete.
type Gate interface {
	// Initialized reports whether every existing rule has been registered.
	Initialized() bool
}

// DeletionValidator is an admission.Handler that denies the deletion of an
// object while objects in the same workspace still reference it, as
// declared by DependencyRules. It decides from the rule registry and live
// lists of the dependents in the consumer workspace; nothing about
// dependents is cached.
type DeletionValidator struct {
	rules       RuleFinder
	gate        Gate
	lister      dependents.Lister
	maxBlockers int
	timeout     time.Duration
	metrics     *Metrics
	scopes      sync.Map // schema.GroupVersionResource → true if cluster-scoped
	now         func() time.Time
}

// Option configures a DeletionValidator.
type Option func(*DeletionValidator)

// WithMaxBlockers sets how many blockers a denial names (default 10); the
// rest are counted.
func WithMaxBlockers(n int) Option {
	return func(v *DeletionValidator) { v.maxBlockers = n }
}

// WithTimeout bounds the time spent listing dependents per request (default
// none). It should be below the webhook timeout kcp applies, so that a slow
// list is answered with a clear denial rather than kcp's timeout error.
func WithTimeout(d time.Duration) Option {
	return func(v *DeletionValidator) { v.timeout = d }
}

// WithMetrics records decisions in m.
func WithMetrics(m *Metrics) Option {
	return func(v *DeletionValidator) { v.metrics = m }
}

// NewDeletionValidator returns a validator that finds rules in rules, waits
// for gate, and lists dependents with lister.
func NewDeletionValidator(rules RuleFinder, gate Gate, lister dependents.Lister, opts ...Option) *DeletionValidator {
	v := &DeletionValidator{rules: rules, gate: gate, lister: lister, maxBlockers: defaultMaxBlockersName, now: time.Now}
	for _, o := range opts {
		o(v)
	}
	return v
}

// objectMeta is the part of the deleted object the validator reads.
type objectMeta struct {
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		UID         string            `json:"uid"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// Handle implements admission.Handler.
func (v *DeletionValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := v.now()
	resp, outcome, scanned := v.handle(ctx, req)
	v.metrics.observe(outcome, v.now().Sub(start), scanned)
	return resp
}

func (v *DeletionValidator) handle(ctx context.Context, req admission.Request) (admission.Response, string, int) {
	logger := log.FromContext(ctx, "resource", req.Resource, "name", req.Name, "namespace", req.Namespace)

	// 1. Only deletions are judged.
	if req.Operation != admissionv1.Delete {
		return admission.Allowed(""), OutcomeAllowed, 0
	}

	// 2. Without every rule registered, a delete could slip through.
	if !v.gate.Initialized() {
		return unavailable("the dependency webhook is starting and has not loaded all DependencyRules yet; retry the delete in a few seconds"), OutcomeError, 0
	}

	// 3. The object being deleted.
	if len(req.OldObject.Raw) == 0 {
		return admission.Errored(http.StatusBadRequest, errors.New("the admission request has no oldObject")), OutcomeError, 0
	}
	obj := &objectMeta{}
	if err := json.Unmarshal(req.OldObject.Raw, obj); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("failed to decode oldObject: %w", err)), OutcomeError, 0
	}
	name, namespace := obj.Metadata.Name, obj.Metadata.Namespace
	if name == "" {
		name = req.Name
	}

	// 4. Explicit bypass, audited and warned about.
	if obj.Metadata.Annotations[depv1alpha1.AnnotationSkipProtection] == "true" {
		user := req.UserInfo.Username
		logger.Info("Deletion protection bypassed", "user", user)
		resp := admission.Allowed("").WithWarnings(fmt.Sprintf(
			"deletion protection of %s %q was bypassed by %s with the %s annotation; objects that still reference it may break",
			req.Resource.Resource, name, user, depv1alpha1.AnnotationSkipProtection))
		resp.AuditAnnotations = map[string]string{AuditDecision: decisionBypassed, AuditSkipProtectionBy: user}
		return resp, OutcomeBypassed, 0
	}

	// 5. The consumer workspace the object lives in.
	cluster := logicalcluster.Name(obj.Metadata.Annotations[logicalcluster.AnnotationKey])
	if cluster.Empty() {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("oldObject has no %s annotation; is the webhook called by kcp?", logicalcluster.AnnotationKey)), OutcomeError, 0
	}
	logger = logger.WithValues("cluster", cluster)

	// 6. The rules protecting this resource.
	target := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	entries := v.rules.FindByTargetGVR(target)
	if len(entries) == 0 {
		return admission.Allowed(""), OutcomeAllowed, 0
	}

	if v.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, v.timeout)
		defer cancel()
	}

	// 7./8. List each dependent type once and collect the blockers.
	self := selfRef{target: target.GroupResource(), namespace: namespace, name: name, uid: obj.Metadata.UID}
	var blockers []Blocker
	scanned := 0
	for _, group := range groupByDependent(entries) {
		n, err := v.scan(ctx, cluster, namespace, group, self, name, &blockers)
		scanned += n
		if err != nil {
			logger.Error(err, "Failed to list dependents", "dependent", group.dependent, "rules", group.rules)
			resp := unavailable(fmt.Sprintf("could not check whether %s %q is still referenced (listing %s failed: %v); retry the delete",
				target.Resource, name, group.dependent.GroupResource(), err))
			resp.AuditAnnotations = map[string]string{AuditDecision: decisionError, AuditFailedRule: group.rules[0]}
			return resp, OutcomeError, scanned
		}
	}

	// 9./10.
	if len(blockers) == 0 {
		return admission.Allowed(""), OutcomeAllowed, scanned
	}
	msg := deniedMessage(target.GroupResource(), namespace, name, blockers, v.maxBlockers)
	logger.V(1).Info("Denied deletion", "blockers", len(blockers))
	resp := admission.Denied(msg)
	resp.AuditAnnotations = map[string]string{AuditDecision: decisionDenied, AuditBlockers: strconv.Itoa(len(blockers))}
	return resp, OutcomeDenied, scanned
}

// selfRef identifies the object being deleted, which never blocks itself.
type selfRef struct {
	target          schema.GroupResource
	namespace, name string
	uid             string
}

// dependentGroup is one dependent type with every path at which any rule
// says it references the target.
type dependentGroup struct {
	dependent schema.GroupVersionResource
	kind      string
	paths     []fieldpath.Path
	rules     []string
}

func groupByDependent(entries []registry.Entry) []*dependentGroup {
	var groups []*dependentGroup
	index := map[schema.GroupVersionResource]*dependentGroup{}
	for _, e := range entries {
		g, ok := index[e.Dependent]
		if !ok {
			g = &dependentGroup{dependent: e.Dependent, kind: e.DependentKind}
			index[e.Dependent] = g
			groups = append(groups, g)
		}
		g.rules = append(g.rules, e.RuleKey)
	paths:
		for _, p := range e.Paths {
			for _, have := range g.paths {
				if have == p {
					continue paths
				}
			}
			g.paths = append(g.paths, p)
		}
	}
	return groups
}

// scan lists the dependents of one type that could reference the target and
// appends those that do to blockers. A namespaced target is referenced from
// its own namespace; a cluster-scoped target from anywhere in the
// workspace. A cluster-scoped dependent type is always listed across the
// workspace.
func (v *DeletionValidator) scan(ctx context.Context, cluster logicalcluster.Name, namespace string, g *dependentGroup, self selfRef, name string, blockers *[]Blocker) (int, error) {
	scanned := 0
	visit := func(item []byte) error {
		scanned++
		matched := false
		for _, p := range g.paths {
			ok, err := p.ContainsJSON(item, name)
			if err != nil {
				return fmt.Errorf("failed to read %s in a %s: %w", p, g.kind, err)
			}
			if ok {
				matched = true
				break
			}
		}
		if !matched {
			return nil
		}
		b, terminating, uid := readBlocker(item, g.kind)
		if terminating {
			return nil // being deleted already; waiting for it could deadlock namespace deletion
		}
		if g.dependent.GroupResource() == self.target && (uid == self.uid && uid != "" || b.Name == self.name && b.Namespace == self.namespace) {
			return nil // an object referencing itself
		}
		*blockers = append(*blockers, b)
		return nil
	}

	clusterScoped, known := v.scopes.Load(g.dependent)
	if namespace == "" || known && clusterScoped.(bool) {
		err := v.lister.List(ctx, cluster, g.dependent, "", visit)
		if errors.Is(err, dependents.ErrNotServed) {
			return scanned, nil // the dependent type is not bound in this workspace
		}
		return scanned, err
	}

	err := v.lister.List(ctx, cluster, g.dependent, namespace, visit)
	if !errors.Is(err, dependents.ErrNotServed) {
		if err == nil && !known {
			v.scopes.Store(g.dependent, false)
		}
		return scanned, err
	}
	// Not served in a namespace: either cluster-scoped, or not bound here.
	err = v.lister.List(ctx, cluster, g.dependent, "", visit)
	if errors.Is(err, dependents.ErrNotServed) {
		return scanned, nil
	}
	if err == nil {
		v.scopes.Store(g.dependent, true)
	}
	return scanned, err
}

// readBlocker reads name, namespace, deletionTimestamp and uid of a
// dependent from its raw JSON.
func readBlocker(item []byte, kind string) (b Blocker, terminating bool, uid string) {
	b.Kind = kind
	paths := [][]string{{"metadata", "name"}, {"metadata", "namespace"}, {"metadata", "deletionTimestamp"}, {"metadata", "uid"}}
	jsonparser.EachKey(item, func(i int, value []byte, typ jsonparser.ValueType, _ error) {
		switch i {
		case 0:
			b.Name, _ = jsonparser.ParseString(value)
		case 1:
			b.Namespace, _ = jsonparser.ParseString(value)
		case 2:
			terminating = typ != jsonparser.Null
		case 3:
			uid, _ = jsonparser.ParseString(value)
		}
	}, paths...)
	return b, terminating, uid
}

// unavailable denies with 503, telling the client to retry.
func unavailable(msg string) admission.Response {
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusServiceUnavailable,
			Reason:  metav1.StatusReasonServiceUnavailable,
			Message: msg,
		},
	}}
}
