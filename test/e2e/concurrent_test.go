//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// concurrentRounds is how many times the concurrent race sends a VM's
// CREATE and the DELETE of the VPC it references at the same moment.
const concurrentRounds = 500

// round is one CREATE of a VM and DELETE of its VPC, sent together.
type round struct {
	ws        logicalcluster.Path
	namespace string
	vpc, vm   string
	// vmRevision is the resourceVersion of the stored VM (0 if its CREATE
	// failed); deleted is set if the DELETE of the VPC succeeded.
	vmRevision int64
	deleted    bool
	createErr  error
	deleteErr  error
}

// leasedRounds is how many times the concurrent race sends a VM's CREATE,
// admitted under the webhook's lease on its VPC, and the DELETE of that VPC
// at the same moment.
const leasedRounds = 300

// clearedRounds is how many times the concurrent race sends a VM's CREATE
// and the DELETE of the cleared VPC it references at the same moment.
const clearedRounds = 200

// concurrentRace creates the VPCs of every round first (they exist when the
// VMs' admission begins; if cleared, it waits until the webhook has cleared
// every one, so that kcp deletes them without calling the webhook unless
// the VM's reference ended the clearance), then, 16 rounds at a time, sends each round's
// CREATE of a VM that references its VPC and the DELETE of that VPC at the
// same moment (the DELETE up to 20 ms later, 500 ms if cleared). No VPC may be deleted after a VM that references it was
// stored: where both succeed, the VPC's deletion (the revision of the watch
// event) must come before the VM's creation.
//
// If leased, each round first creates two VMs that reference its VPC, the
// second within moments of the first (so that the webhook takes a lease on
// the VPC, see inflight.Lease), and deletes them; the round's VM is then
// admitted under the lease, without a write of its own, while the DELETE
// finds the lease on the VPC. Every other round sends the DELETE first, up
// to 200 ms before the CREATE.
func concurrentRace(ctx context.Context, prefix string, rounds int, cleared, leased bool) {
	GinkgoHelper()
	const workers = 16
	deletedAt := watchDeletions([]logicalcluster.Path{consumerA, consumerB}, vpcs)
	all := make([]*round, rounds)
	for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
		for n := range raceNamespaces {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, n)}}
			Expect(client.IgnoreAlreadyExists(cli.Cluster(ws).Create(ctx, ns))).To(Succeed())
		}
	}
	var wg sync.WaitGroup
	work := make(chan int)
	for range workers {
		wg.Go(func() {
			defer GinkgoRecover()
			for i := range work {
				r := &round{ws: []logicalcluster.Path{consumerA, consumerB}[i%2], namespace: fmt.Sprintf("%s-%d", prefix, (i/2)%raceNamespaces),
					vpc: fmt.Sprintf("vpc-%04d", i), vm: fmt.Sprintf("vm-%04d", i)}
				target := vpc(r.vpc)
				target.SetNamespace(r.namespace)
				Expect(cli.Cluster(r.ws).Create(ctx, target)).To(Succeed())
				all[i] = r
			}
		})
	}
	for i := range rounds {
		work <- i
	}
	close(work)
	wg.Wait()
	if cleared {
		By("waiting until the elected replica has cleared every VPC")
		pending := append([]*round(nil), all...)
		Eventually(func(g Gomega) {
			var left []*round
			for _, r := range pending {
				got := vpc(r.vpc)
				g.Expect(cli.Cluster(r.ws).Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: r.vpc}, got)).To(Succeed())
				if l := got.GetAnnotations()[depv1alpha1.AnnotationAdmittedReferences]; !strings.Contains(l, " c=") || !strings.HasSuffix(l, "/"+string(got.GetUID())) {
					left = append(left, r)
				}
			}
			pending = left
			var some []string
			for _, r := range pending[:min(len(pending), 5)] {
				some = append(some, fmt.Sprintf("%s %s/%s", r.ws, r.namespace, r.vpc))
			}
			g.Expect(some).To(BeEmpty(), "%d VPCs not cleared yet", len(pending))
		}).WithTimeout(4 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	}

	lagStep := time.Millisecond
	switch {
	case cleared:
		lagStep = 25 * time.Millisecond
	case leased:
		// A DELETE that finds the lease ends it (a write) and reads the
		// VPC before it decides, and is admitted again after that write:
		// up to 200 ms, so that some DELETEs end before the CREATE leaves.
		lagStep = 10 * time.Millisecond
	}
	By("sending each VM's CREATE and its VPC's DELETE at the same moment")
	start := time.Now()
	work = make(chan int)
	for range workers {
		wg.Go(func() {
			defer GinkgoRecover()
			for i := range work {
				r := all[i]
				dependent := vm(r.vm, r.vpc)
				dependent.SetNamespace(r.namespace)
				target := vpc(r.vpc)
				target.SetNamespace(r.namespace)
				if leased {
					streak := []string{"streak-a-" + r.vm, "streak-b-" + r.vm}
					for _, name := range streak {
						dependent := vm(name, r.vpc)
						dependent.SetNamespace(r.namespace)
						Expect(cli.Cluster(r.ws).Create(ctx, dependent)).To(Succeed())
					}
					for _, name := range streak {
						gone := object(vms, name, nil)
						gone.SetNamespace(r.namespace)
						Expect(cli.Cluster(r.ws).Delete(ctx, gone)).To(Succeed())
					}
					// The index sees them go within milliseconds; the lease
					// taken by the second lasts a second.
					time.Sleep(300 * time.Millisecond)
				}
				// The DELETE leaves up to 20 ms after the CREATE, so that the
				// rounds cover every interleaving of the two admissions; up to
				// 500 ms for a cleared VPC, whose DELETE kcp admits without
				// calling the webhook while the VM's CREATE waits for the
				// write of its reference (stored about 100 ms after the
				// CREATE left, with 16 rounds in flight; more on a slow
				// host), so that the DELETEs leave before, during and after
				// that write.
				// Under a lease the VM's admission writes nothing, so in
				// every other round the DELETE leaves first, by the same
				// lags: both orders of the two admissions occur.
				lag, lead := time.Duration(i%21)*lagStep, time.Duration(0)
				if leased && i%2 == 1 {
					lag, lead = lead, lag
				}
				kcpenv.Together(lead, func() { r.createErr = cli.Cluster(r.ws).Create(ctx, dependent) },
					lag, func() { r.deleteErr = cli.Cluster(r.ws).Delete(ctx, target) })
				if r.createErr == nil {
					rv, err := strconv.ParseInt(dependent.GetResourceVersion(), 10, 64)
					Expect(err).NotTo(HaveOccurred())
					r.vmRevision = rv
				}
				r.deleted = r.deleteErr == nil
			}
		})
	}
	for i := range rounds {
		work <- i
	}
	close(work)
	wg.Wait()
	took := time.Since(start)

	var (
		vmFirst, vpcFirst, inFlight, denied, streakDenied int
		failures                                          []string
	)
	for _, r := range all {
		switch {
		case r.createErr != nil:
			failures = append(failures, fmt.Sprintf("%s %s/%s: the VM's CREATE failed: %v", r.ws, r.namespace, r.vm, r.createErr))
		case !r.deleted && apierrors.IsConflict(r.deleteErr) && strings.Contains(r.deleteErr.Error(), "in flight"):
			vmFirst++
			inFlight++
		case !r.deleted && apierrors.IsForbidden(r.deleteErr) && strings.Contains(r.deleteErr.Error(), "VirtualMachine/"+r.namespace+"/"+r.vm):
			vmFirst++
			denied++
		case leased && !r.deleted && apierrors.IsForbidden(r.deleteErr) && strings.Contains(r.deleteErr.Error(), "VirtualMachine/"+r.namespace+"/streak-"):
			// The index had not yet seen a VM of the streak go: the round
			// tells nothing, and deleted nothing.
			vmFirst++
			streakDenied++
		case !r.deleted:
			failures = append(failures, fmt.Sprintf("%s %s/%s: the VPC's DELETE failed: %v", r.ws, r.namespace, r.vpc, r.deleteErr))
		default:
			var rev int64
			Eventually(func() bool {
				var ok bool
				rev, ok = deletedAt(r.ws, vpcs, r.namespace, r.vpc)
				return ok
			}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue(), "no watch event for the deletion of %s/%s", r.namespace, r.vpc)
			if rev > r.vmRevision {
				failures = append(failures, fmt.Sprintf("%s %s/%s was deleted (revision %d) after %s/%s, which references it, was stored (revision %d)",
					r.ws, r.namespace, r.vpc, rev, r.namespace, r.vm, r.vmRevision))
				continue
			}
			vpcFirst++
		}
	}
	GinkgoWriter.Printf("%s: %d rounds in %s: VM first %d (denied %d, refused while in flight %d, denied by a VM of the streak not yet seen gone %d), VPC deleted first %d, wrong %d\n",
		prefix, rounds, took.Round(time.Millisecond), vmFirst, denied, inFlight, streakDenied, vpcFirst, len(failures))
	if n := len(failures); n > 10 {
		failures = append(failures[:10], fmt.Sprintf("and %d more", n-10))
	}
	Expect(failures).To(BeEmpty())
	if cleared {
		// Both orders occurred, so the rounds between them crossed the
		// write of the VM's reference on the cleared VPC.
		Expect(vmFirst).To(BeNumerically(">", 0), "no DELETE came after a VM's reference was recorded: the lags did not reach the write")
		Expect(vpcFirst).To(BeNumerically(">", 0), "no DELETE came before a VM's reference was recorded")
	}
	Expect(vmFirst + vpcFirst).To(Equal(rounds))
}

// expectTracked waits until the sample rule reports ReferencesTracked=True
// (which takes a VM to probe kcp's admission with), and checks that a VM's
// CREATE then recorded its reference on the VPC, with the VM's admission
// id.
func expectTracked(ctx context.Context) {
	GinkgoHelper()
	Expect(client.IgnoreAlreadyExists(cli.Cluster(compute).Create(ctx, sampleRule()))).To(Succeed())
	Expect(client.IgnoreAlreadyExists(cli.Cluster(consumerA).Create(ctx, vm("vm-probe", "vpc-none")))).To(Succeed())
	Eventually(func(g Gomega) {
		rule := &depv1alpha1.DependencyRule{}
		g.Expect(cli.Cluster(compute).Get(ctx, client.ObjectKey{Name: "vm-dependencies"}, rule)).To(Succeed())
		c := meta.FindStatusCondition(rule.Status.Conditions, depv1alpha1.ConditionReferencesTracked)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
	}).WithTimeout(2 * timeout).WithPolling(interval).Should(Succeed())
	create(ctx, consumerA, vpc("vpc-tracked"), vm("vm-tracked", "vpc-tracked"))
	Eventually(func(g Gomega) {
		got := vpc("vpc-tracked")
		g.Expect(cli.Cluster(consumerA).Get(ctx, client.ObjectKey{Namespace: "default", Name: "vpc-tracked"}, got)).To(Succeed())
		dependent := vm("vm-tracked", "vpc-tracked")
		g.Expect(cli.Cluster(consumerA).Get(ctx, client.ObjectKey{Namespace: "default", Name: "vm-tracked"}, dependent)).To(Succeed())
		id := dependent.GetLabels()[depv1alpha1.LabelAdmission]
		g.Expect(id).NotTo(BeEmpty())
		g.Expect(got.GetAnnotations()[depv1alpha1.AnnotationAdmittedReferences]).To(ContainSubstring(id + "@"))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}
