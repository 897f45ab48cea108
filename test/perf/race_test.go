//go:build perf

package perf

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// raceWorkers is how many rounds of the race are in flight at once.
const raceWorkers = 16

// raceRound is one CREATE of a VM that references a VPC and the DELETE of
// that VPC, sent at the same moment.
type raceRound struct {
	vpc, vm string
	// vmRevision is the resourceVersion of the stored VM, 0 if its CREATE
	// failed.
	vmRevision           int64
	createErr, deleteErr error
}

// races sends n rounds of a VM's CREATE and the DELETE of the existing VPC
// it references at the same moment (raceWorkers rounds in flight, the
// DELETE i%21 ms after the CREATE of round i, as test/e2e's concurrent race
// does), without any rule, with the rule, and with the rule while the
// webhook holds a lease on the VPC (two VMs created and deleted just
// before; the DELETE leads in every other round), and reports how each
// round ended: where both succeeded, a watch of the VPCs tells whether the VPC
// was deleted (the revision of its deletion) before or after the VM was
// stored (its CREATE's resourceVersion). With the rule no VPC may be
// deleted after a VM that references it was stored: the test fails
// otherwise.
func (s *setup) races(ctx context.Context, t *testing.T, n int) []string {
	report := []string{fmt.Sprintf("## A VM's CREATE and its VPC's DELETE sent together: %d rounds, %d in flight", n, raceWorkers), "",
		"| | rounds | VPC deleted after the VM referencing it was stored | VM first: DELETE denied | VM first: DELETE refused, reference in flight | VPC deleted first | failed requests | seconds |",
		"|---|---|---|---|---|---|---|---|"}
	var notes []string
	for _, c := range []struct {
		p      *protection
		leased bool
	}{{nil, false}, {s.standard, false}, {s.standard, true}} {
		p := c.p
		row, note := s.race(ctx, t, n, p, c.leased)
		report = append(report, row)
		if p != nil {
			notes = append(notes, note)
		}
	}
	return append(append(report, ""), append(notes, "")...)
}

// race runs the rounds of races under p (nil: no rule), leased or not, in
// a namespace of their own, and returns the row and a note on the
// references the webhook recorded.
func (s *setup) race(ctx context.Context, t *testing.T, n int, p *protection, leased bool) (string, string) {
	setupName, ns := "no rule", "race-free"
	switch {
	case leased:
		setupName, ns = "with the rule, under the webhook's lease on the VPC", "race-lease"
	case p != nil:
		setupName, ns = "with the rule", "race-rule"
	}
	s.protect(ctx, t, p)
	if p != nil {
		s.waitTracked(ctx, t, p)
	}
	s.createNamespace(ctx, t, ns)
	rounds := make([]raceRound, n)
	for i := range rounds {
		rounds[i] = raceRound{vpc: fmt.Sprintf("vpc-%04d", i), vm: fmt.Sprintf("vm-%04d", i)}
	}
	createObjects(t, s.dyn, vpcs, ns, n, func(i int) (string, map[string]any) { return rounds[i].vpc, map[string]any{} })
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	deleted, err := kcpenv.WatchDeletions(watchCtx, s.dyn.Resource(vpcs).Namespace(ns))
	must(t, err)
	recorded0 := s.recorded(t)

	start := time.Now()
	must(t, parallel(n, raceWorkers, func(i int) error {
		r := &rounds[i]
		if leased {
			// The second of two references within the lease streak takes
			// a lease on the VPC; the index sees both VMs go within
			// milliseconds, and the lease lasts a second.
			streak := []string{"streak-a-" + r.vm, "streak-b-" + r.vm}
			for _, name := range streak {
				if _, err := s.dyn.Resource(vms).Namespace(ns).Create(ctx, newObject(vms, ns, name, vmSpec(r.vpc)), metav1.CreateOptions{}); err != nil {
					return fmt.Errorf("CREATE of %s: %w", name, err)
				}
			}
			for _, name := range streak {
				if err := s.dyn.Resource(vms).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					return fmt.Errorf("DELETE of %s: %w", name, err)
				}
			}
			time.Sleep(300 * time.Millisecond)
		}
		// The DELETE leaves up to 20 ms after the CREATE, so that the
		// rounds cover every interleaving of the two admissions; under a
		// lease the VM's admission writes nothing, so in every other round
		// the DELETE leaves first, by up to 200 ms (a DELETE that finds the
		// lease ends it and reads the VPC before it decides).
		lag, lead := time.Duration(i%21)*time.Millisecond, time.Duration(0)
		if leased {
			lag = 10 * lag
			if i%2 == 1 {
				lag, lead = lead, lag
			}
		}
		kcpenv.Together(lead, func() {
			created, err := s.dyn.Resource(vms).Namespace(ns).Create(ctx, newObject(vms, ns, r.vm, vmSpec(r.vpc)), metav1.CreateOptions{})
			if r.createErr = err; err == nil {
				r.vmRevision, r.createErr = strconv.ParseInt(created.GetResourceVersion(), 10, 64)
			}
		}, lag, func() {
			r.deleteErr = s.dyn.Resource(vpcs).Namespace(ns).Delete(ctx, r.vpc, metav1.DeleteOptions{})
		})
		return nil
	}))
	took := time.Since(start)
	recorded := s.recorded(t).since(recorded0)

	var wrong, denied, inFlight, vpcFirst, streakDenied int
	var failures, problems []string
	for _, r := range rounds {
		switch {
		case r.createErr != nil:
			failures = append(failures, fmt.Sprintf("CREATE of %s: %v", r.vm, r.createErr))
		case r.deleteErr == nil:
			var rev int64
			if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (seen bool, err error) {
				rev, seen, err = deleted.Revision(ns, r.vpc)
				return seen, err
			}); err != nil {
				t.Fatalf("%s: no watch event for the deletion of %s/%s (%v)", setupName, ns, r.vpc, err)
			}
			if rev > r.vmRevision {
				wrong++
				problems = append(problems, fmt.Sprintf("%s/%s deleted at revision %d after %s, which references it, was stored at %d", ns, r.vpc, rev, r.vm, r.vmRevision))
				continue
			}
			vpcFirst++
		case apierrors.IsConflict(r.deleteErr) && strings.Contains(r.deleteErr.Error(), "in flight"):
			inFlight++
		case apierrors.IsForbidden(r.deleteErr) && strings.Contains(r.deleteErr.Error(), "VirtualMachine/"+ns+"/"+r.vm):
			denied++
		case leased && apierrors.IsForbidden(r.deleteErr) && strings.Contains(r.deleteErr.Error(), "VirtualMachine/"+ns+"/streak-"):
			// The index had not yet seen a VM of the streak go: the round
			// tells nothing, and deleted nothing.
			streakDenied++
		default:
			failures = append(failures, fmt.Sprintf("DELETE of %s: %v", r.vpc, r.deleteErr))
		}
	}
	t.Logf("race, %s: %d rounds in %s: VM first %d (denied %d, refused while in flight %d), VPC deleted first %d, VPC deleted after its VM was stored %d, denied by a VM of the streak not yet seen gone %d, failed %d",
		setupName, n, took.Round(time.Millisecond), denied+inFlight, denied, inFlight, vpcFirst, wrong, streakDenied, len(failures))
	if p != nil && wrong > 0 {
		t.Errorf("race with the rule: %d VPCs deleted after a VM referencing them was stored, e.g.:\n%s", wrong, strings.Join(first(problems), "\n"))
	}
	if p != nil && len(failures) > 0 {
		t.Errorf("race with the rule: %d requests failed, e.g.:\n%s", len(failures), strings.Join(first(failures), "\n"))
	}
	if p == nil && len(failures) > 0 {
		t.Logf("race without a rule: %d requests failed, e.g.:\n%s", len(failures), strings.Join(first(failures), "\n"))
	}
	s.dropNamespaces(ctx, t, ns)
	note := fmt.Sprintf("%s: the labelling webhook recorded the references of the %d CREATEs as %s (dependency_webhook_references_recorded_total by result).", setupName, n, recorded)
	if leased {
		note += fmt.Sprintf(" The references of the streaks count too; in %d rounds the DELETE was denied by a VM of the streak that the index had not yet seen go (not in the row).", streakDenied)
	}
	return fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %d | %.1f |", setupName, n, wrong, denied, inFlight, vpcFirst, len(failures), took.Seconds()), note
}

// recordings are the webhook's counts of the references it recorded on the
// objects they name, by result.
type recordings map[string]float64

// recordResults are the results of recording a reference.
var recordResults = []string{"recorded", "missing", "refused", "untracked", "failed"}

// recorded returns the webhook's counts of recorded references.
func (s *setup) recorded(t *testing.T) recordings {
	out := recordings{}
	for _, r := range recordResults {
		out[r] = s.counter(t, `dependency_webhook_references_recorded_total{result="`+r+`"}`)
	}
	return out
}

// since describes the counts since before: "recorded 480, missing 20, ...".
func (r recordings) since(before recordings) string {
	var parts []string
	for _, res := range recordResults {
		parts = append(parts, fmt.Sprintf("%s %.0f", res, r[res]-before[res]))
	}
	return strings.Join(parts, ", ")
}

// shown is how many problems of a kind a failure lists.
const shown = 5

// first returns the first shown of list, and how many more there are.
func first(list []string) []string {
	if len(list) > shown {
		return append(list[:shown:shown], fmt.Sprintf("and %d more", len(list)-shown))
	}
	return list
}
