package deletion

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// fakeEventer records the Events it is asked to record.
type fakeEventer struct {
	lock   sync.Mutex
	events []string
	done   chan struct{}
}

func (f *fakeEventer) CreateEvent(context.Context, index.Source, logicalcluster.Name, string, []byte) error {
	return nil
}

func (f *fakeEventer) Event(_ context.Context, _ index.Source, _ string, obj kcp.Meta, eventType, reason, msg string) error {
	f.lock.Lock()
	f.events = append(f.events, obj.Name+" "+eventType+" "+reason+": "+msg)
	f.lock.Unlock()
	f.done <- struct{}{}
	return nil
}

// A refused DELETE leaves one DeletionBlocked Event on the object, not one
// per attempt, and a dry run or an item of kcp's teardown leaves none.
func TestDeniedDeletesLeaveAnEvent(t *testing.T) {
	rules := staticRules{vpcs.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name")}}
	deps := &fakeDependents{}
	deps.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
	events := &fakeEventer{done: make(chan struct{}, 10)}
	v := NewValidator(rules, loaded(true), deps, WithEvents(events))
	ctx := webhook.WithProvider(context.Background(), provider)
	dry := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
	dry.DryRun = ptr.To(true)
	for _, req := range []func() bool{
		func() bool { return !v.Handle(ctx, dry).Allowed },
		func() bool {
			return !v.Handle(ctx, teardownItem(deleteRequest(vpcs, consumer, "default", "vpc-a", nil))).Allowed
		},
		func() bool { return !v.Handle(ctx, deleteRequest(vpcs, consumer, "default", "vpc-a", nil)).Allowed },
		func() bool { return !v.Handle(ctx, deleteRequest(vpcs, consumer, "default", "vpc-a", nil)).Allowed },
	} {
		if !req() {
			t.Fatal("a DELETE of a referenced VPC was allowed")
		}
	}
	select {
	case <-events.done:
	case <-time.After(5 * time.Second):
		t.Fatal("no Event")
	}
	time.Sleep(100 * time.Millisecond)
	events.lock.Lock()
	defer events.lock.Unlock()
	if len(events.events) != 1 || !strings.HasPrefix(events.events[0], "vpc-a Warning DeletionBlocked: ") || !strings.Contains(events.events[0], "VirtualMachine/default/vm-1") {
		t.Errorf("events %v; want one DeletionBlocked Event naming the VM", events.events)
	}
}

// A deletion deferred under a Replay rule leaves its record on the object,
// and no DeletionBlocked Event; one that could not be deferred (and so is
// refused as under Deny) leaves the Event.
func TestDeferredDeletesLeaveNoEvent(t *testing.T) {
	rules := staticRules{vpcs.GroupResource(): {withTarget(replayEntry(entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name")))}}
	for _, tt := range []struct {
		name      string
		recordErr error
		wantEvent bool
	}{
		{name: "deferred", wantEvent: false},
		{name: "could not be deferred", recordErr: errors.New("no consent to patch"), wantEvent: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{}
			deps.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			events := &fakeEventer{done: make(chan struct{}, 10)}
			recorder := &fakeRecorder{err: tt.recordErr}
			v := NewValidator(rules, loaded(true), deps, WithEvents(events), WithRecorder(recorder))
			ctx := webhook.WithProvider(context.Background(), provider)
			resp := v.Handle(ctx, deleteRequest(vpcs, consumer, "default", "vpc-a", nil))
			if resp.Allowed {
				t.Fatal("a DELETE of a referenced VPC was allowed")
			}
			if deferred := len(recorder.recorded) == 1; deferred == tt.wantEvent {
				t.Fatalf("recorded %v, want a record: %v", recorder.recorded, !tt.wantEvent)
			}
			select {
			case <-events.done:
				if !tt.wantEvent {
					t.Errorf("events %v, want none", events.events)
				}
			case <-time.After(500 * time.Millisecond):
				if tt.wantEvent {
					t.Error("no Event")
				}
			}
		})
	}
}
