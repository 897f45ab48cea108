package teardown

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"
)

// An item tells that its resource in its namespace of its workspace is
// being deleted, for UnderwayFor after the last item; what expired is
// forgotten.
func TestUnderway(t *testing.T) {
	vpcs, subnets := schema.GroupResource{Group: "net.io", Resource: "vpcs"}, schema.GroupResource{Group: "net.io", Resource: "subnets"}
	now := time.Unix(1000, 0)
	u := newUnderway(clockFunc(func() time.Time { return now }))
	u.Saw("c1", "doomed", vpcs)
	u.Saw("c1", "", vpcs)
	tests := []struct {
		cluster, namespace string
		resource           schema.GroupResource
		want               bool
	}{
		{"c1", "doomed", vpcs, true},
		{"c1", "", vpcs, true},
		{"c1", "doomed", subnets, false},
		{"c1", "other", vpcs, false},
		{"c2", "doomed", vpcs, false},
	}
	for _, tt := range tests {
		if got := u.Deleting(logicalcluster.Name(tt.cluster), tt.namespace, tt.resource); got != tt.want {
			t.Errorf("Deleting(%s, %q, %s) = %v, want %v", tt.cluster, tt.namespace, tt.resource, got, tt.want)
		}
	}
	now = now.Add(UnderwayFor - time.Second)
	u.Saw("c1", "doomed", vpcs) // kcp retries the items
	now = now.Add(time.Second)
	if !u.Deleting("c1", "doomed", vpcs) {
		t.Error("a teardown whose items came again was forgotten")
	}
	if u.Deleting("c1", "", vpcs) {
		t.Errorf("a teardown without items for %s still counts", UnderwayFor)
	}
	now = now.Add(UnderwayFor)
	u.Saw("c2", "other", subnets)
	if kept := u.seen.Keys(); len(kept) != 1 {
		t.Errorf("%d entries kept, want only the one seen last", len(kept))
	}
}

// Saw returns when the first item of a teardown came, for every later item
// of it, until the teardown is forgotten; then an item begins a new one.
func TestUnderwaySawReturnsTheFirstItem(t *testing.T) {
	vpcs := schema.GroupResource{Group: "net.io", Resource: "vpcs"}
	start := time.Unix(1000, 0)
	now := start
	u := newUnderway(clockFunc(func() time.Time { return now }))
	steps := []struct {
		after     time.Duration
		namespace string
		want      time.Time
	}{
		{0, "doomed", start},
		{time.Second, "doomed", start},
		{time.Minute, "doomed", start}, // kcp backs off up to a minute
		{UnderwayFor - time.Second, "doomed", start},
		{0, "other", start.Add(time.Second + time.Minute + UnderwayFor - time.Second)},
		{UnderwayFor, "doomed", start.Add(time.Second + time.Minute + 2*UnderwayFor - time.Second)},
	}
	for i, s := range steps {
		now = now.Add(s.after)
		if got := u.Saw("c1", s.namespace, vpcs); !got.Equal(s.want) {
			t.Errorf("step %d: Saw(%s) = %v, want %v", i, s.namespace, got, s.want)
		}
	}
}

// clockFunc is a cache.Clock that reads the time from a function.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }
