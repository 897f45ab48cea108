package teardown

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestWaits(t *testing.T) {
	vpc := corev1.ObjectReference{APIVersion: "network.io/v1", Kind: "VPC", Namespace: "ns", Name: "vpc-a", UID: "u1"}
	router := corev1.ObjectReference{APIVersion: "network.io/v1", Kind: "Router", Name: "edge", UID: "u2"}
	tests := []struct {
		name          string
		obj           corev1.ObjectReference
		terminating   bool
		msg           string
		wantNamespace string
		wantInvolved  corev1.ObjectReference
		wantMessage   string
	}{
		{
			name: "in a namespace being deleted: about the namespace, in default", obj: vpc, terminating: true, msg: "waits",
			wantNamespace: "default", wantInvolved: corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: "ns"}, wantMessage: "waits",
		},
		{
			name: "elsewhere: about the object, in its namespace", obj: vpc, msg: "waits",
			wantNamespace: "ns", wantInvolved: vpc, wantMessage: "waits",
		},
		{
			name: "a cluster-scoped object: about it, in default", obj: router, terminating: true, msg: "waits",
			wantNamespace: "default", wantInvolved: router, wantMessage: "waits",
		},
		{
			name: "a long message is cut", obj: vpc, msg: strings.Repeat("x", 2000),
			wantNamespace: "ns", wantInvolved: vpc, wantMessage: strings.Repeat("x", 1021) + "...",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWaits()
			now := time.Unix(1000, 0)
			w.now = func() time.Time { return now }
			var namespaces []string
			var events []corev1.Event
			create := func(_ context.Context, namespace string, body []byte) error {
				var e corev1.Event
				if err := json.Unmarshal(body, &e); err != nil {
					return err
				}
				namespaces, events = append(namespaces, namespace), append(events, e)
				return nil
			}
			ctx := context.Background()
			for range 3 {
				if err := w.Record(ctx, create, tt.obj, tt.terminating, tt.msg); err != nil {
					t.Fatal(err)
				}
			}
			if len(events) != 1 {
				t.Fatalf("%d Events for the same wait, want 1", len(events))
			}
			e := events[0]
			if namespaces[0] != tt.wantNamespace || e.Namespace != tt.wantNamespace || e.InvolvedObject != tt.wantInvolved || e.Message != tt.wantMessage ||
				e.Reason != EventReasonWaits || e.Type != corev1.EventTypeWarning {
				t.Errorf("Event in %q (%q) about %+v: %s %s %q; want in %q about %+v: %q", namespaces[0], e.Namespace, e.InvolvedObject, e.Type, e.Reason, e.Message,
					tt.wantNamespace, tt.wantInvolved, tt.wantMessage)
			}
			if err := w.Record(ctx, create, tt.obj, tt.terminating, tt.msg+" still"); err != nil || len(events) != 2 {
				t.Errorf("another message was not recorded (%v)", err)
			}
			now = now.Add(waitTTL)
			if err := w.Record(ctx, create, tt.obj, tt.terminating, tt.msg); err != nil || len(events) != 3 {
				t.Errorf("the same wait was not recorded again after %s (%v)", waitTTL, err)
			}
		})
	}
}
