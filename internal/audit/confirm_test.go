package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// fakeReader serves the objects that sets of targets leave out: exists
// holds those that exist, as "cluster/namespace/name" (or "cluster/name"),
// failing those whose reads fail. It records its reads.
type fakeReader struct {
	exists  map[string]bool
	failing map[string]bool
	reads   []string
}

func (r *fakeReader) Get(_ context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string) ([]byte, error) {
	key := cluster.String() + "/" + name
	if namespace != "" {
		key = cluster.String() + "/" + namespace + "/" + name
	}
	r.reads = append(r.reads, "get "+key)
	switch {
	case r.failing[key]:
		return nil, errors.New("connection refused")
	case r.exists[key]:
		return []byte(`{}`), nil
	}
	return nil, apierrors.NewNotFound(src.Resource.GroupResource(), name)
}

func (r *fakeReader) ListObjectsIn(_ context.Context, _ index.Source, cluster logicalcluster.Name, labelSelector string, _ func(kcp.Meta, []byte) bool, visit func(kcp.Meta, []byte) error) error {
	r.reads = append(r.reads, fmt.Sprintf("list %s %s", cluster, labelSelector))
	for key := range r.exists {
		c, ns, name := object(key)
		if c == cluster.String() && ns != "" {
			if err := visit(kcp.Meta{Cluster: cluster, Namespace: ns, Name: name}, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// takeReads returns the reads since the last call, sorted.
func (r *fakeReader) takeReads() []string {
	reads := r.reads
	r.reads = nil
	slices.Sort(reads)
	return reads
}

func newReaderHarness(t *testing.T, exists ...string) (*harness, *fakeReader) {
	h := newHarness(t)
	r := &fakeReader{exists: map[string]bool{}, failing: map[string]bool{}}
	for _, o := range exists {
		r.exists[o] = true
	}
	h.a.opts.Reader = r
	return h, r
}

func (h *harness) reads(result string) float64 {
	return testutil.ToFloat64(h.metrics.reads.WithLabelValues(result))
}

// A set of targets leaves out the objects labelled cleared, a label that
// anyone may set: an object that a reference names and its set lacks is
// read before the reference counts as dangling. One that exists is not
// read again for the grace period; one missing is read again once per
// grace period, so just before it is reported.
func TestAnObjectLeftOutOfItsSetIsReadBeforeItCounts(t *testing.T) {
	h, r := newReaderHarness(t, "c1/default/vpc-labelled")
	h.ix.putDependent(t, vms, "c1/default/vm-1", `{"vpcRef":{"name":"vpc-labelled"}}`)
	h.ix.putDependent(t, vms, "c1/default/vm-2", `{"vpcRef":{"name":"vpc-gone"}}`)
	h.ix.putDependent(t, vms, "c1/default/vm-3", `{"vpcRef":{"name":"vpc-gone"}}`)

	steps := []struct {
		name  string
		after time.Duration
		reads []string
		// status of the VM rule ("" if none written yet) and what its
		// message names.
		status   metav1.ConditionStatus
		names    []string
		dangling float64
	}{
		{name: "first pass: both read, once each", reads: []string{"get c1/default/vpc-gone", "get c1/default/vpc-labelled"}},
		{name: "within the grace period: nothing read", after: 10 * time.Second},
		{name: "a pass later still: nothing read", after: grace - 20*time.Second},
		{name: "the grace period over: both read again, the references to the missing one reported", after: 10 * time.Second,
			reads: []string{"get c1/default/vpc-gone", "get c1/default/vpc-labelled"}, status: metav1.ConditionFalse, names: []string{"2 references", "vm-2", "vm-3"}, dangling: 2},
		{name: "reported: nothing read", after: 10 * time.Second, status: metav1.ConditionFalse, dangling: 2},
	}
	for _, s := range steps {
		h.pass(s.after)
		if got := r.takeReads(); !slices.Equal(got, s.reads) {
			t.Errorf("%s: reads %v, want %v", s.name, got, s.reads)
		}
		c, written := h.condition(vmRule)
		switch {
		case s.status == "" && written:
			t.Errorf("%s: condition written: %+v", s.name, c)
		case s.status != "" && (!written || c.Status != s.status):
			t.Errorf("%s: condition %+v (written %v), want %s", s.name, c, written, s.status)
		}
		for _, n := range s.names {
			if !strings.Contains(c.Message, n) {
				t.Errorf("%s: message %q does not name %q", s.name, c.Message, n)
			}
		}
		if strings.Contains(c.Message, "vpc-labelled") {
			t.Errorf("%s: a reference to an object that exists is reported: %q", s.name, c.Message)
		}
		if got := h.dangling(vms); got != s.dangling {
			t.Errorf("%s: dangling_references = %v, want %v", s.name, got, s.dangling)
		}
	}
	if h.reads(readExists) != 2 || h.reads(readMissing) != 2 || h.reads(readFailed) != 0 {
		t.Errorf("reads counted: %v exists, %v missing, %v failed", h.reads(readExists), h.reads(readMissing), h.reads(readFailed))
	}
}

// An object read and found to exist is forgotten once it is in its set
// again; left out again, it is read again at once.
func TestAnObjectBackInItsSetIsForgotten(t *testing.T) {
	h, r := newReaderHarness(t, "c1/default/vpc-a")
	h.ix.putDependent(t, vms, "c1/default/vm-1", `{"vpcRef":{"name":"vpc-a"}}`)
	h.pass(0)
	if got := r.takeReads(); len(got) != 1 || len(h.a.hidden) != 1 {
		t.Fatalf("reads %v, %d objects remembered", got, len(h.a.hidden))
	}
	h.ix.target(t, vpcs, "c1/default/vpc-a", false)
	h.pass(time.Second)
	if got := r.takeReads(); len(got) != 0 || len(h.a.hidden) != 0 {
		t.Errorf("in its set: reads %v, %d objects remembered", got, len(h.a.hidden))
	}
	h.ix.target(t, vpcs, "c1/default/vpc-a", true)
	h.pass(time.Second)
	if got := r.takeReads(); !slices.Equal(got, []string{"get c1/default/vpc-a"}) {
		t.Errorf("left out again: reads %v", got)
	}
	if len(h.a.findings) != 0 {
		t.Errorf("findings %v", h.a.findings)
	}
}

// A read that fails adds no finding, and keeps one that was: the object
// is read again by the next pass.
func TestAFailedReadKeepsWhatWasFound(t *testing.T) {
	h, r := newReaderHarness(t)
	h.ix.putDependent(t, vms, "c1/default/vm-1", `{"vpcRef":{"name":"vpc-gone"}}`)
	h.ix.putDependent(t, vms, "c1/default/vm-2", `{"vpcRef":{"name":"vpc-unknown"}}`)
	r.failing["c1/default/vpc-unknown"] = true
	h.pass(0)
	if len(h.a.findings) != 1 {
		t.Fatalf("findings after the first pass: %d, want the one read missing", len(h.a.findings))
	}
	r.takeReads()
	h.pass(time.Second)
	if got := r.takeReads(); !slices.Equal(got, []string{"get c1/default/vpc-unknown"}) {
		t.Errorf("second pass: reads %v, want the failed one again", got)
	}
	r.failing["c1/default/vpc-gone"] = true
	h.pass(grace)
	if len(h.a.findings) != 1 {
		t.Errorf("after a failed read of the object found missing: %d findings, want it kept", len(h.a.findings))
	}
	h.expectCondition(vmRule, metav1.ConditionFalse, depv1alpha1.ReasonDangling, "vpc-gone")
	// vpc-unknown in every pass, vpc-gone in the last.
	if h.reads(readFailed) != 4 {
		t.Errorf("failed reads counted: %v, want 4", h.reads(readFailed))
	}
}

// A pass reads at most maxReadsPerPass objects; the next reads the rest,
// and the references to each count once it was read.
func TestReadsPerPassAreBounded(t *testing.T) {
	h, r := newReaderHarness(t)
	n := maxReadsPerPass + 6
	for i := range n {
		h.ix.putDependent(t, vms, fmt.Sprintf("c1/default/vm-%d", i), fmt.Sprintf(`{"vpcRef":{"name":"vpc-%d"}}`, i))
	}
	h.pass(0)
	if got := len(r.takeReads()); got != maxReadsPerPass || len(h.a.findings) != maxReadsPerPass {
		t.Errorf("first pass: %d reads, %d findings; want %d", got, len(h.a.findings), maxReadsPerPass)
	}
	h.pass(time.Second)
	if got := len(r.takeReads()); got != 6 || len(h.a.findings) != n {
		t.Errorf("second pass: %d reads, %d findings; want 6 and %d", got, len(h.a.findings), n)
	}
	h.pass(time.Second)
	if got := r.takeReads(); len(got) != 0 {
		t.Errorf("third pass: %d reads", len(got))
	}
}

// A reference that names an object in any namespace (a cluster-scoped
// dependent's, without a namespace) is looked for among the objects of
// its workspace labelled cleared, which its set leaves out.
func TestANameInAnyNamespaceIsLookedForAmongTheLabelled(t *testing.T) {
	h, r := newReaderHarness(t, "c1/team/vpc-labelled")
	h.ix.putDependent(t, gateways, "c1/gw-1", `{"vpc":"vpc-labelled"}`)
	h.ix.putDependent(t, gateways, "c1/gw-2", `{"vpc":"vpc-gone"}`)
	h.pass(0)
	want := "list c1 " + depv1alpha1.LabelCleared
	if got := r.takeReads(); !slices.Equal(got, []string{want, want}) {
		t.Errorf("reads %v, want %q twice", got, want)
	}
	if len(h.a.findings) != 1 {
		t.Fatalf("%d findings, want the reference to vpc-gone", len(h.a.findings))
	}
	for k := range h.a.findings {
		if k.name != "gw-2" || !k.anyNamespace {
			t.Errorf("finding %+v", k)
		}
	}
}
