package plugin

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

func TestParseDangling(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want *Reference
	}{
		{
			`VirtualMachine/default/vm-1 references vpcs.network.test.io "vpc-x" in namespace "default", which does not exist`,
			&Reference{Resource: "vpcs.network.test.io", Namespace: "default", Name: "vpc-x"},
		},
		{`Zone/z references zones.network.test.io "eu-9", which does not exist`, &Reference{Resource: "zones.network.test.io", Name: "eu-9"}},
		{`VirtualMachine/default/vm-1 references vpcs "vpc-x" in namespace "team-a", which does not exist (since 5m)`, &Reference{Resource: "vpcs", Namespace: "team-a", Name: "vpc-x"}},
		{"something else entirely", nil},
	} {
		if got := parseDangling(tc.msg); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseDangling(%q) = %+v, want %+v", tc.msg, got, tc.want)
		}
	}
}

// danglingEvent returns a DanglingReference Event on a VM.
func danglingEvent(namespace, vm string, uid types.UID, at time.Time, msg string) corev1.Event {
	return corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: namespace, Name: vm + "." + at.Format("150405")},
		InvolvedObject: corev1.ObjectReference{APIVersion: "compute.test.io/v1", Kind: "VirtualMachine", Namespace: namespace, Name: vm, UID: uid},
		Type:           corev1.EventTypeWarning, Reason: "DanglingReference", Message: msg,
		LastTimestamp: metav1.NewTime(at),
	}
}

func TestDangling(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ref := func(ns, vm, vpc string) string {
		return "VirtualMachine/" + ns + "/" + vm + ` references vpcs.network.test.io "` + vpc + `" in namespace "` + ns + `", which does not exist`
	}
	withUID := func(u *unstructured.Unstructured, uid types.UID) *unstructured.Unstructured {
		u.SetUID(uid)
		return u
	}
	key := func(vpc string) string { return reflabels.Key(vpcsGVR.GroupResource(), vpc) }
	r := &fakeReader{
		objects: map[schema.GroupVersionResource][]*unstructured.Unstructured{
			vmsGVR: {
				withUID(obj(vmsGVR, "default", "vm-1", labelled(key("vpc-x")), nil), "u1"),
				withUID(obj(vmsGVR, "default", "vm-2", labelled(key("vpc-y")), nil), "u2"),
				withUID(obj(vmsGVR, "default", "vm-bare", labelled(key("vpc-z")), nil), "u6"),
				withUID(obj(vmsGVR, "default", "vm-moved-on", labelled(key("vpc-a")), nil), "u3"),
				withUID(obj(vmsGVR, "default", "vm-recreated", labelled(key("vpc-x")), nil), "new"),
				withUID(obj(vmsGVR, "team-b", "vm-9", nil, nil), "u9"),
				withUID(obj(vmsGVR, "default", "vm-created", labelled(key("vpc-now")), nil), "u4"),
			},
			vpcsGVR: {obj(vpcsGVR, "default", "vpc-now", nil, nil)},
		},
		events: []corev1.Event{
			danglingEvent("default", "vm-1", "u1", now.Add(-time.Hour), ref("default", "vm-1", "vpc-x")),
			danglingEvent("default", "vm-1", "u1", now.Add(-time.Minute), ref("default", "vm-1", "vpc-x")),
			danglingEvent("default", "vm-2", "u2", now.Add(-30*time.Minute), ref("default", "vm-2", "vpc-y")),
			// The resource without its group: the label key still uses
			// the group the workspace serves it under.
			danglingEvent("default", "vm-bare", "u6", now.Add(-40*time.Minute), `VirtualMachine/default/vm-bare references vpcs "vpc-z" in namespace "default", which does not exist`),
			// Its reference changed since.
			danglingEvent("default", "vm-moved-on", "u3", now.Add(-time.Minute), ref("default", "vm-moved-on", "vpc-x")),
			// The VM of the Event was deleted and created again.
			danglingEvent("default", "vm-recreated", "old", now.Add(-time.Minute), ref("default", "vm-recreated", "vpc-x")),
			// Gone.
			danglingEvent("default", "vm-gone", "u5", now.Add(-time.Minute), ref("default", "vm-gone", "vpc-x")),
			// The VPC was created since.
			danglingEvent("default", "vm-created", "u4", now.Add(-time.Minute), ref("default", "vm-created", "vpc-now")),
			// A message that does not parse: kept as it is.
			danglingEvent("team-b", "vm-9", "u9", now.Add(-2*time.Hour), "references something that is missing"),
			// Another reason.
			{InvolvedObject: corev1.ObjectReference{APIVersion: "compute.test.io/v1", Kind: "VirtualMachine", Namespace: "default", Name: "vm-1"}, Type: corev1.EventTypeWarning, Reason: "DeletionBlocked"},
		},
	}
	e := &env{mapper: testMapper(), reader: r}
	got, err := dangling(context.Background(), e, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range got.Dangling {
		names = append(names, d.String())
	}
	if want := []string{"VirtualMachine/default/vm-1", "VirtualMachine/default/vm-2", "VirtualMachine/default/vm-bare", "VirtualMachine/team-b/vm-9"}; !reflect.DeepEqual(names, want) {
		t.Errorf("dangling = %q, want %q (newest first)", names, want)
	}
	if got.Resolved != 4 {
		t.Errorf("resolved = %d, want 4", got.Resolved)
	}
	if !got.Dangling[0].LastSeen.Equal(now.Add(-time.Minute)) || got.Dangling[0].Reference.Name != "vpc-x" || got.Dangling[3].Reference != nil {
		t.Errorf("dangling = %+v", got.Dangling)
	}
	if reqs := r.requestsMatching("events"); !reflect.DeepEqual(reqs, []string{"events  type=Warning,reason=DanglingReference"}) {
		t.Errorf("requests = %q", reqs)
	}

	got, err = dangling(context.Background(), e, "team-b")
	if err != nil || len(got.Dangling) != 1 {
		t.Errorf("in team-b: %+v, %v", got, err)
	}

	var out bytes.Buffer
	if err := printDangling(&out, DanglingResult{Dangling: []DanglingReference{
		{Object: Object{Kind: "VirtualMachine", Namespace: "default", Name: "vm-1"}, Reference: &Reference{Resource: "vpcs.network.test.io", Namespace: "default", Name: "vpc-x"}, LastSeen: now.Add(-90 * time.Second)},
		{Object: Object{Kind: "VirtualMachine", Namespace: "team-b", Name: "vm-9"}, Message: "references something that is missing", LastSeen: now.Add(-2 * time.Hour)},
	}, Resolved: 2}, now); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"KIND             NAMESPACE   NAME   REFERENCE                               AGE\n",
		"VirtualMachine   default     vm-1   vpcs.network.test.io/vpc-x in default   90s\n",
		"VirtualMachine   team-b      vm-9   references something that is missing    120m\n",
		"2 objects reference objects that do not exist (2 reported earlier no longer dangle).\n",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}
