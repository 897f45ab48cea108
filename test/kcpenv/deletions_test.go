package kcpenv

import (
	"context"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// A watch that the server closes is resumed from the last revision it saw,
// and deletions after that are recorded, each at its revision; one that
// cannot be resumed says why.
func TestWatchDeletionsResumes(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "vpcs"}
	vpc := func(name, rv string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("network.test.io/v1")
		u.SetKind("VPC")
		u.SetNamespace("default")
		u.SetName(name)
		u.SetResourceVersion(rv)
		return u
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "VPCList"})
	watches := make(chan *watch.FakeWatcher, 3)
	var (
		lock    sync.Mutex
		resumed []string
	)
	client.PrependWatchReactor("vpcs", func(action clienttesting.Action) (bool, watch.Interface, error) {
		lock.Lock()
		resumed = append(resumed, action.(clienttesting.WatchAction).GetWatchRestrictions().ResourceVersion)
		lock.Unlock()
		w := watch.NewFakeWithChanSize(10, false)
		watches <- w
		return true, w, nil
	})
	client.PrependReactor("list", "vpcs", func(clienttesting.Action) (bool, runtime.Object, error) {
		list := &unstructured.UnstructuredList{}
		list.SetResourceVersion("10")
		return true, list, nil
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deletions, err := WatchDeletions(ctx, client.Resource(gvr).Namespace("default"))
	if err != nil {
		t.Fatal(err)
	}
	next := func() *watch.FakeWatcher {
		t.Helper()
		select {
		case w := <-watches:
			return w
		case <-time.After(10 * time.Second):
			t.Fatal("no watch")
			return nil
		}
	}
	expectDeleted := func(name string, want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if rev, ok, _ := deletions.Revision("default", name); ok {
				if rev != want {
					t.Fatalf("%s deleted at revision %d, want %d", name, rev, want)
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("no deletion of %s recorded", name)
	}

	first := next()
	first.Add(vpc("vpc-a", "11"))
	first.Delete(vpc("vpc-a", "12"))
	expectDeleted("vpc-a", 12)
	first.Stop() // the server closes the watch
	second := next()
	second.Delete(vpc("vpc-b", "13"))
	expectDeleted("vpc-b", 13)
	lock.Lock()
	if len(resumed) != 2 || resumed[0] != "10" || resumed[1] != "12" {
		t.Errorf("watched from the revisions %v, want [10 12]", resumed)
	}
	lock.Unlock()
	if _, ok, err := deletions.Revision("default", "vpc-c"); ok || err != nil {
		t.Errorf("vpc-c: deleted %t (%v) while the watch runs; it never was", ok, err)
	}

	// Once the watch ended, an object it did not see deleted may have been.
	second.Error(&apierrors.NewResourceExpired("too old resource version: 12 (40)").ErrStatus)
	deadline := time.Now().Add(10 * time.Second)
	_, ok, err := deletions.Revision("default", "vpc-c")
	for err == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		_, ok, err = deletions.Revision("default", "vpc-c")
	}
	if ok || !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("vpc-c after the watch ended: deleted %t (%v), want the watch's expiry", ok, err)
	}
	if rev, ok, err := deletions.Revision("default", "vpc-a"); !ok || rev != 12 || err != nil {
		t.Errorf("vpc-a after the watch ended: %d, %t, %v; want its deletion at 12", rev, ok, err)
	}
}
