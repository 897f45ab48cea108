package relabel

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

const fingerprint = "0123456789abcdef"

// fakeRules serves one labelling.
type fakeRules map[registry.Target]registry.Labelling

func (f fakeRules) Labellings() map[registry.Target]registry.Labelling { return f }
func (f fakeRules) Changes() <-chan struct{}                           { return nil }

// fakeObjects lists stale and answers each patch with what labelling webhook
// would have done: the scheme label it leaves on the object.
type fakeObjects struct {
	stale    []kcp.Meta
	listErr  error
	selector string
	// after is the scheme label a patched object comes back with; err, if
	// set, is the patch's error.
	after func(name string) (string, error)

	lock    sync.Mutex
	patched []string
}

func (f *fakeObjects) List(_ context.Context, _ index.Source, selector string, visit func(kcp.Meta) error) error {
	f.selector = selector
	if f.listErr != nil {
		return f.listErr
	}
	for _, m := range f.stale {
		if err := visit(m); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeObjects) Patch(_ context.Context, _ index.Source, _ logicalcluster.Name, _, name string, pt types.PatchType, body []byte) ([]byte, error) {
	f.lock.Lock()
	f.patched = append(f.patched, name)
	f.lock.Unlock()
	if pt != types.MergePatchType {
		return nil, errors.New("not a merge patch")
	}
	var sent struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &sent); err != nil {
		return nil, err
	}
	scheme := sent.Metadata.Labels[depv1alpha1.LabelReferencesScheme]
	if !strings.HasPrefix(scheme, relabelPrefix) {
		return nil, errors.New("the patch does not write a throwaway scheme label: " + scheme)
	}
	if f.after != nil {
		got, err := f.after(name)
		if err != nil {
			return nil, err
		}
		if got != "" {
			scheme = got
		}
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"name": name, "labels": map[string]string{depv1alpha1.LabelReferencesScheme: scheme}}})
}

func metas(names ...string) []kcp.Meta {
	out := make([]kcp.Meta, 0, len(names))
	for _, n := range names {
		out = append(out, kcp.Meta{Cluster: "consumer", Namespace: "default", Name: n})
	}
	return out
}

func TestPass(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "apis.kcp.io", Resource: "apiexports/content"}, "compute.test.io", errors.New("no"))
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "virtualmachines"}, "vm")
	labelledTo := func(scheme string) func(string) (string, error) {
		return func(string) (string, error) { return scheme, nil }
	}
	tests := []struct {
		name        string
		labellable  bool
		index       *fakeObjects
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
		wantPatched int
		wantLeft    int
	}{{
		name:       "a type that cannot be labelled is reported and not written",
		index:      &fakeObjects{stale: metas("vm-1")},
		wantStatus: metav1.ConditionFalse, wantReason: depv1alpha1.ReasonNotLabellable, wantMessage: "a reference in the status",
		wantLeft: -1,
	}, {
		name:       "nothing stale: labelled",
		labellable: true,
		index:      &fakeObjects{},
		wantStatus: metav1.ConditionTrue, wantReason: depv1alpha1.ReasonLabelled,
	}, {
		name:       "a dependent with too many references for labels, first in the list, counts as labelled: labelling goes on",
		labellable: true,
		index: &fakeObjects{stale: metas("vm-big", "vm-2"), after: func(name string) (string, error) {
			if name == "vm-big" {
				return reflabels.TooMany(fingerprint), nil
			}
			return fingerprint, nil
		}},
		wantStatus: metav1.ConditionTrue, wantReason: depv1alpha1.ReasonLabelled,
		wantPatched: 2,
	}, {
		name:       "every stale dependent relabelled by the labelling webhook",
		labellable: true,
		index:      &fakeObjects{stale: metas("vm-1", "vm-2", "vm-3"), after: labelledTo(fingerprint)},
		wantStatus: metav1.ConditionTrue, wantReason: depv1alpha1.ReasonLabelled,
		wantPatched: 3,
	}, {
		name:       "a dependent gone meanwhile counts as done",
		labellable: true,
		index: &fakeObjects{stale: metas("vm-1", "vm-2"), after: func(name string) (string, error) {
			if name == "vm-1" {
				return "", notFound
			}
			return fingerprint, nil
		}},
		wantStatus: metav1.ConditionTrue, wantReason: depv1alpha1.ReasonLabelled,
		wantPatched: 2,
	}, {
		name:       "without the labelling webhook one dependent is written per pass",
		labellable: true,
		index:      &fakeObjects{stale: metas("vm-1", "vm-2", "vm-3")},
		wantStatus: metav1.ConditionUnknown, wantReason: depv1alpha1.ReasonLabelling, wantMessage: "waiting for the labelling webhook",
		wantPatched: 1, wantLeft: 3,
	}, {
		name:       "without the patch grant one dependent is tried per pass",
		labellable: true,
		index:      &fakeObjects{stale: metas("vm-1", "vm-2"), after: func(string) (string, error) { return "", forbidden }},
		wantStatus: metav1.ConditionFalse, wantReason: depv1alpha1.ReasonAccessDenied, wantMessage: `patch on apiexports/content of "compute.test.io"`,
		wantPatched: 1, wantLeft: 2,
	}, {
		name:       "a webhook with other rules labels under another scheme: labelling goes on",
		labellable: true,
		index:      &fakeObjects{stale: metas("vm-1", "vm-2"), after: labelledTo("fedcba9876543210")},
		wantStatus: metav1.ConditionUnknown, wantReason: depv1alpha1.ReasonLabelling, wantMessage: "not labelled under the current rules yet",
		wantPatched: 2, wantLeft: 2,
	}, {
		name:       "a list that fails is reported, nothing written",
		labellable: true,
		index:      &fakeObjects{listErr: errors.New("connection refused")},
		wantStatus: metav1.ConditionUnknown, wantReason: depv1alpha1.ReasonLabelling, wantMessage: "connection refused",
		wantLeft: -1,
	}, {
		name:       "terminating dependents are left alone",
		labellable: true,
		index:      &fakeObjects{stale: []kcp.Meta{{Cluster: "consumer", Namespace: "default", Name: "vm-1", Terminating: true}}},
		wantStatus: metav1.ConditionTrue, wantReason: depv1alpha1.ReasonLabelled,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := registry.Target{Cluster: "compute", Resource: schema.GroupResource{Group: "compute.test.io", Resource: "virtualmachines"}}
			rules := []kcp.ObjectKey{{Cluster: "compute", Name: "vm-vpcs"}, {Cluster: "compute", Name: "vm-subnets"}}
			l := registry.Labelling{Rules: rules, Labellable: tt.labellable}
			if tt.labellable {
				l.Dependent = index.Source{Export: kcp.ObjectKey{Cluster: "compute", Name: "compute.test.io"}}
				l.Scheme = reflabels.Scheme{Fingerprint: fingerprint}
			} else {
				l.Reason = "a reference in the status"
			}
			written := map[kcp.ObjectKey]metav1.Condition{}
			write := func(_ context.Context, rule kcp.ObjectKey, condition func(int64) metav1.Condition) error {
				written[rule] = condition(3)
				return nil
			}
			left := -1
			r := New(fakeRules{target: l}, tt.index, write, Options{Workers: 2, OnUnlabelled: func(got registry.Target, n int) {
				if got != target {
					t.Errorf("OnUnlabelled for %v, want %v", got, target)
				}
				left = n
			}})
			r.now = func() time.Time { return time.Unix(1700000000, 0) }
			r.pass(context.Background())

			if len(written) != len(rules) {
				t.Fatalf("conditions written for %d rules, want %d: %v", len(written), len(rules), written)
			}
			for rule, c := range written {
				if c.Type != depv1alpha1.ConditionDependentsLabelled || c.Status != tt.wantStatus || c.Reason != tt.wantReason || c.ObservedGeneration != 3 {
					t.Errorf("%v: condition %s=%s (%s, generation %d), want %s=%s (%s, generation 3)", rule, c.Type, c.Status, c.Reason, c.ObservedGeneration,
						depv1alpha1.ConditionDependentsLabelled, tt.wantStatus, tt.wantReason)
				}
				if !strings.Contains(c.Message, tt.wantMessage) {
					t.Errorf("%v: message %q does not contain %q", rule, c.Message, tt.wantMessage)
				}
			}
			if got := len(tt.index.patched); got != tt.wantPatched {
				t.Errorf("patched %d dependents (%v), want %d", got, tt.index.patched, tt.wantPatched)
			}
			if left != tt.wantLeft {
				t.Errorf("OnUnlabelled reported %d left, want %d", left, tt.wantLeft)
			}
			if tt.labellable && tt.index.selector != reflabels.UnlabelledSelector(fingerprint) {
				t.Errorf("listed with selector %q, want %q", tt.index.selector, reflabels.UnlabelledSelector(fingerprint))
			}
		})
	}
}
