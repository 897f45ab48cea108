package teardown

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestScope(t *testing.T) {
	tests := []struct {
		name string
		// terminating are the namespaces being deleted; failing those
		// the probe cannot answer for.
		terminating []string
		failing     []string
		nilProbe    bool
		namespace   string
		wantDeletes bool
		wantWhy     string
		wantName    string
	}{
		{
			name:        "a namespace being deleted deletes its objects",
			terminating: []string{"ns"}, namespace: "ns",
			wantDeletes: true, wantName: `the deletion of namespace "ns"`,
		},
		{
			name:      "a namespace not being deleted (an APIBinding's teardown) does not",
			namespace: "ns",
			wantWhy:   `namespace "ns" is not being deleted`, wantName: "",
		},
		{
			name:        "another namespace being deleted does not make this one",
			terminating: []string{"other"}, namespace: "ns",
			wantWhy: `namespace "ns" is not being deleted`, wantName: "",
		},
		{
			name:        "with the workspace being deleted (default is), every namespace goes",
			terminating: []string{"default"}, namespace: "ns",
			wantDeletes: true, wantName: "the workspace's deletion",
		},
		{
			name:        "with the workspace being deleted, cluster-scoped objects go",
			terminating: []string{"default"},
			wantDeletes: true, wantName: "the workspace's deletion",
		},
		{
			name:        "a cluster-scoped object goes only with its workspace",
			terminating: []string{"ns", "other"},
			wantWhy:     "cluster-scoped", wantName: "",
		},
		{
			name:    "a cluster-scoped object, when the probe cannot answer for default (gone, or never there), is not taken as deleted",
			failing: []string{"default"},
			wantWhy: "it cannot be told whether the workspace is being deleted: no claim", wantName: "",
		},
		{
			name:    "a namespace the probe cannot answer for is not taken as deleted",
			failing: []string{"ns"}, namespace: "ns",
			wantWhy: `cannot be told whether namespace "ns" is being deleted: no claim`, wantName: "",
		},
		{
			name:     "without a probe, nothing is taken as deleted",
			nilProbe: true, namespace: "ns",
			wantWhy: "does not ask", wantName: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := map[string]int{}
			var probe Probe = func(_ context.Context, namespace string) (bool, error) {
				asked[namespace]++
				for _, f := range tt.failing {
					if f == namespace {
						return false, errors.New("no claim")
					}
				}
				for _, ns := range tt.terminating {
					if ns == namespace {
						return true, nil
					}
				}
				return false, nil
			}
			if tt.nilProbe {
				probe = nil
			}
			s := NewScope(probe)
			ctx := context.Background()
			for range 3 {
				deletes, why := s.Deletes(ctx, tt.namespace)
				if deletes != tt.wantDeletes || !strings.Contains(why, tt.wantWhy) || deletes && why != "" {
					t.Errorf("Deletes(%q) = %v, %q; want %v, %q", tt.namespace, deletes, why, tt.wantDeletes, tt.wantWhy)
				}
				if answered := s.Answered(ctx, tt.namespace); answered == (tt.nilProbe || strings.Contains(tt.wantWhy, "cannot be told")) {
					t.Errorf("Answered(%q) = %v", tt.namespace, answered)
				}
				if name, known := s.Name(ctx, tt.namespace); name != tt.wantName || known != (tt.wantName != "") {
					t.Errorf("Name(%q) = %q, %v; want %q", tt.namespace, name, known, tt.wantName)
				}
			}
			for ns, n := range asked {
				if n != 1 {
					t.Errorf("asked about namespace %q %d times, want once", ns, n)
				}
			}
		})
	}
}

func TestBroken(t *testing.T) {
	b := NewBroken[string, string](time.Minute)
	now := time.Unix(1000, 0)
	b.now = func() time.Time { return now }
	if _, _, ok := b.Members("a"); ok {
		t.Fatal("an empty memory knows a")
	}
	b.Remember([]string{"a", "b"}, "a, b")
	in, _, ok := b.Members("b")
	if !ok || !in("a") || !in("b") || in("c") {
		t.Fatalf("members of b's component: %v", ok)
	}
	now = now.Add(30 * time.Second)
	b.Remember([]string{"c", "d"}, "c, d")
	if _, description, ok := b.Members("a"); !ok || description != "a, b" {
		t.Errorf("a was forgotten before its TTL, or its description %q is not a, b", description)
	}
	now = now.Add(31 * time.Second)
	if _, _, ok := b.Members("a"); ok {
		t.Error("a was remembered past its TTL")
	}
	b.Remember([]string{"e"}, "e")
	if got := b.Len(); got != 3 {
		t.Errorf("remembers %d objects after a's component expired, want 3 (c, d, e)", got)
	}
	b.Forget("d")
	if _, _, ok := b.Members("c"); ok || b.Len() != 1 {
		t.Errorf("c is remembered after its component was forgotten, or %d objects remain (want e)", b.Len())
	}
}
