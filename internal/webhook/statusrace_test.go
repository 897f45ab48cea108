package webhook_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// statusRound is one write through a dependent's status subresource that
// adds a reference to a VPC, and the DELETE of that VPC, sent together.
type statusRound struct {
	vpc, dependent string
	// revision is the resourceVersion the status write stored (0 if it
	// failed); deleted is set if the DELETE of the VPC succeeded.
	revision  int64
	deleted   bool
	writeErr  error
	deleteErr error
}

// statusRace creates rounds VPCs and as many dependents of dependentGVR
// (whose rule reads the reference at .status.vpc) in a namespace of the
// workspace that cfg reaches, then, 16 rounds at a time, writes each
// dependent's status to reference its VPC and deletes that VPC at the same
// moment (one up to 20 or 500 ms after the other). No VPC may be deleted after the
// status write that references it was stored: where both succeed, the
// VPC's deletion (the revision of its watch event) must come first.
func statusRace(ctx context.Context, cfg *rest.Config, vpcGVR, dependentGVR schema.GroupVersionResource, namespace string, rounds int) {
	GinkgoHelper()
	const workers = 16
	c, err := client.New(cfg, client.Options{Scheme: kcpenv.NewScheme()})
	Expect(err).NotTo(HaveOccurred())
	dyn, err := dynamic.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	Expect(client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}))).To(Succeed())
	watchCtx, stop := context.WithCancel(context.Background())
	DeferCleanup(stop)
	deleted, err := kcpenv.WatchDeletions(watchCtx, dyn.Resource(vpcGVR).Namespace(namespace))
	Expect(err).NotTo(HaveOccurred())

	all := make([]*statusRound, rounds)
	dependents := make([]*unstructured.Unstructured, rounds)
	parallel := func(do func(i int)) {
		var wg sync.WaitGroup
		work := make(chan int)
		for range workers {
			wg.Go(func() {
				defer GinkgoRecover()
				for i := range work {
					do(i)
				}
			})
		}
		for i := range rounds {
			work <- i
		}
		close(work)
		wg.Wait()
	}
	parallel(func(i int) {
		r := &statusRound{vpc: fmt.Sprintf("vpc-%04d", i), dependent: fmt.Sprintf("dependent-%04d", i)}
		Expect(c.Create(ctx, newObject(vpcGVR, namespace, r.vpc, nil))).To(Succeed())
		d := newObject(dependentGVR, namespace, r.dependent, nil)
		Expect(c.Create(ctx, d)).To(Succeed())
		all[i], dependents[i] = r, d
	})

	By("writing each dependent's status to reference its VPC, and deleting the VPC, at the same moment")
	start := time.Now()
	parallel(func(i int) {
		r, d := all[i], dependents[i]
		Expect(unstructured.SetNestedField(d.Object, r.vpc, "status", "vpc")).To(Succeed())
		// In even rounds the DELETE leaves up to 20 ms after the write; in
		// odd ones the write up to 500 ms after the DELETE (whose decision
		// reads the dependents live, slower when 16 rounds read at once),
		// so that the rounds cover every interleaving of the two
		// admissions.
		writeLag, deleteLag := time.Duration(i/2%21)*25*time.Millisecond, time.Duration(0)
		if i%2 == 0 {
			writeLag, deleteLag = 0, time.Duration(i/2%21)*time.Millisecond
		}
		kcpenv.Together(writeLag, func() { r.writeErr = c.Status().Update(ctx, d) },
			deleteLag, func() { r.deleteErr = c.Delete(ctx, newObject(vpcGVR, namespace, r.vpc, nil)) })
		if r.writeErr == nil {
			rv, err := strconv.ParseInt(d.GetResourceVersion(), 10, 64)
			Expect(err).NotTo(HaveOccurred())
			r.revision = rv
		}
		r.deleted = r.deleteErr == nil
	})
	took := time.Since(start)

	kind := kindOf(dependentGVR)
	var (
		writeFirst, vpcFirst, inFlight, denied int
		failures                               []string
	)
	for _, r := range all {
		switch {
		case r.writeErr != nil && r.deleted && apierrors.IsForbidden(r.writeErr) && strings.Contains(r.writeErr.Error(), "it is being deleted"):
			vpcFirst++
		case r.writeErr != nil:
			failures = append(failures, fmt.Sprintf("%s: the status write failed: %v (the VPC's DELETE: %v)", r.dependent, r.writeErr, r.deleteErr))
		case !r.deleted && apierrors.IsConflict(r.deleteErr) && strings.Contains(r.deleteErr.Error(), "in flight"):
			writeFirst++
			inFlight++
		case !r.deleted && apierrors.IsForbidden(r.deleteErr) && strings.Contains(r.deleteErr.Error(), kind+"/"+namespace+"/"+r.dependent):
			writeFirst++
			denied++
		case !r.deleted:
			failures = append(failures, fmt.Sprintf("%s: the VPC's DELETE failed: %v", r.vpc, r.deleteErr))
		default:
			var rev int64
			Eventually(func() error {
				at, seen, err := deleted.Revision(namespace, r.vpc)
				if seen {
					rev = at
					return nil
				}
				return cmp.Or(err, errors.New("not yet"))
			}).WithTimeout(timeout).WithPolling(interval).Should(Succeed(), "no watch event for the deletion of %s", r.vpc)
			if rev > r.revision {
				failures = append(failures, fmt.Sprintf("%s was deleted (revision %d) after the status of %s, which references it, was stored (revision %d)",
					r.vpc, rev, r.dependent, r.revision))
				continue
			}
			vpcFirst++
		}
	}
	GinkgoWriter.Printf("status race: %d rounds in %s: status write first %d (denied %d, refused while in flight %d), VPC deleted first %d, wrong %d\n",
		rounds, took.Round(time.Millisecond), writeFirst, denied, inFlight, vpcFirst, len(failures))
	Expect(failures).To(BeEmpty())
	Expect(writeFirst + vpcFirst).To(Equal(rounds))
}
