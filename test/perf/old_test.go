//go:build perf

package perf

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/test/procenv"
)

// oldAge is how long before the DELETEs measured on "old" objects these were
// created and last referenced, and the rules reported ReferencesTracked=True:
// more than inflight.MaxInFlight (65 s) and the index's lag (a few seconds),
// past which the webhook allows the DELETE of an object whose references are
// tracked without reading dependents (via="horizon").
const oldAge = 2 * time.Minute

// allowedViaHorizon is the webhook's count of DELETEs allowed without a
// read, its index being current past the object's horizon.
const allowedViaHorizon = `dependency_webhook_decisions_total{outcome="allowed",via="horizon"}`

// trackedWait bounds how long waitTracked waits.
const trackedWait = 5 * time.Minute

// waitTracked waits until every rule of p reports ReferencesTracked=True
// (the webhook records on the objects they name the references that
// dependents' writes add) and returns the latest of their transitions to
// True, from which on the webhook counts the references as tracked.
func (s *setup) waitTracked(ctx context.Context, t *testing.T, p *protection) time.Time {
	t.Helper()
	start := time.Now()
	var since time.Time
	var last *metav1.Condition
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, trackedWait, true, func(context.Context) (bool, error) {
		since = time.Time{}
		for _, r := range p.rules {
			if last = s.conditionOf(ctx, t, r, depv1alpha1.ConditionReferencesTracked); last == nil || last.Status != metav1.ConditionTrue {
				return false, nil
			}
			since = later(since, last.LastTransitionTime.Time)
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the rules %s do not report ReferencesTracked=True within %s: %+v", p.names(), trackedWait, last)
	}
	t.Logf("the rules %s reported ReferencesTracked=True (since %s) after %s", p.names(), since.Format(time.TimeOnly), time.Since(start).Round(100*time.Millisecond))
	return since
}

// clearancesWritten counts the clearances the elected replica wrote: an
// object cleared is deleted by kcp without calling the webhook.
const clearancesWritten = `dependency_webhook_clearances_total{result="cleared"}`

// clearerListed counts the protected objects the clearer listed.
const clearerListed = "dependency_webhook_clearance_listed_objects_total"

// clearanceWait bounds how long the deletion of old objects waits for
// the clearances of 1,000 objects: the webhook lists the protected objects
// every 30s.
const clearanceWait = 2 * time.Minute

// waitCleared waits until the webhook has written n clearances more than
// before, at most clearanceWait per 1,000, and returns how many it wrote.
func (s *setup) waitCleared(t *testing.T, before float64, n int) float64 {
	t.Helper()
	start, clearanceWait := time.Now(), clearanceWait*time.Duration(max(1, (n+999)/1000))
	cleared := s.counter(t, clearancesWritten) - before
	for cleared < float64(n) && time.Since(start) < clearanceWait {
		time.Sleep(time.Second)
		cleared = s.counter(t, clearancesWritten) - before
	}
	t.Logf("%.0f of %d objects cleared after %s", cleared, n, time.Since(start).Round(100*time.Millisecond))
	return cleared
}

// waitAged waits until oldAge has passed since the latest of times.
func waitAged(t *testing.T, times ...time.Time) {
	var latest time.Time
	for _, at := range times {
		latest = later(latest, at)
	}
	if d := time.Until(latest.Add(oldAge)); d > 0 {
		t.Logf("waiting %s, until %s have passed since %s", d.Round(time.Second), oldAge, latest.Format(time.TimeOnly))
		time.Sleep(d)
	}
}

// median returns the median of d: the middle value, or the mean of the two
// middle ones.
func median(d []time.Duration) time.Duration {
	d = slices.Sorted(slices.Values(d))
	if n := len(d); n%2 == 0 {
		return (d[n/2-1] + d[n/2]) / 2
	}
	return d[len(d)/2]
}

// pairedRatio returns the median of the ratios b[i]/a[i]: each pair
// measured next to each other, with and without what is compared.
func pairedRatio(a, b []time.Duration) float64 {
	n := min(len(a), len(b))
	ratios := make([]float64, 0, n)
	for i := range n {
		if a[i] > 0 {
			ratios = append(ratios, b[i].Seconds()/a[i].Seconds())
		}
	}
	if len(ratios) == 0 {
		return 0
	}
	slices.Sort(ratios)
	if n := len(ratios); n%2 == 0 {
		return (ratios[n/2-1] + ratios[n/2]) / 2
	}
	return ratios[len(ratios)/2]
}

// seconds renders durations as seconds, comma-separated.
func seconds(d []time.Duration) string {
	out := make([]string, len(d))
	for i, v := range d {
		out[i] = fmt.Sprintf("%.1f", v.Seconds())
	}
	return strings.Join(out, ", ")
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// decided are the webhook's DELETE decisions by how they were reached
// (dependency_webhook_decisions_total, every outcome), and the refusals
// while a reference was in flight.
type decided struct {
	teardown, horizon, revision, live, index, inFlight float64
}

// decisions returns the webhook's counts of DELETE decisions.
func (s *setup) decisions(t *testing.T) decided {
	const name = "dependency_webhook_decisions_total"
	via := func(v string) float64 { return s.sum(t, name, `via="`+v+`"`) }
	return decided{teardown: via("teardown"), horizon: via("horizon"), revision: via("revision"), live: via("live"), index: via("index"),
		inFlight: s.sum(t, name, `outcome="in-flight"`)}
}

// since returns the decisions since before as "teardown / horizon /
// revision / live / index / in-flight".
func (d decided) since(before decided) string {
	return d.minus(before).String()
}

// minus returns the decisions of d that before does not count.
func (d decided) minus(before decided) decided {
	return decided{teardown: d.teardown - before.teardown, horizon: d.horizon - before.horizon, revision: d.revision - before.revision,
		live: d.live - before.live, index: d.index - before.index, inFlight: d.inFlight - before.inFlight}
}

// plus returns the decisions of d and o together.
func (d decided) plus(o decided) decided {
	return decided{teardown: d.teardown + o.teardown, horizon: d.horizon + o.horizon, revision: d.revision + o.revision,
		live: d.live + o.live, index: d.index + o.index, inFlight: d.inFlight + o.inFlight}
}

// String renders the decisions as "teardown / horizon / revision / live /
// index / in-flight".
func (d decided) String() string {
	return fmt.Sprintf("%.0f / %.0f / %.0f / %.0f / %.0f / %.0f", d.teardown, d.horizon, d.revision, d.live, d.index, d.inFlight)
}

// deletionCounts are the clearances written and the DELETE decisions made
// during a kind of namespace deletion, over its rounds.
type deletionCounts struct {
	cleared float64
	decided decided
}

// String renders the counts as "cleared / teardown / horizon / ...".
func (c deletionCounts) String() string {
	return fmt.Sprintf("%.0f / %s", c.cleared, c.decided)
}

// whyNotHorizon describes what the webhook's decision of the allowed DELETE
// of the VPC name in ns rests on, for a note when it was not decided via
// horizon: the rule's ReferencesTracked condition, the VPC's ledger of
// admitted references and creation, and the currency of the index.
func (s *setup) whyNotHorizon(ctx context.Context, t *testing.T, ns, name string) string {
	var notes []string
	for _, r := range s.standard.rules {
		if c := s.conditionOf(ctx, t, r, depv1alpha1.ConditionReferencesTracked); c != nil {
			notes = append(notes, fmt.Sprintf("rule %s: ReferencesTracked=%s since %s (%s)", r.Name, c.Status, c.LastTransitionTime.Format(time.TimeOnly), c.Reason))
		}
	}
	if obj, err := s.dyn.Resource(vpcs).Namespace(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		notes = append(notes, fmt.Sprintf("%s/%s created %s, ledger %q", ns, name, obj.GetCreationTimestamp().Format(time.TimeOnly),
			obj.GetAnnotations()[depv1alpha1.AnnotationAdmittedReferences]))
	}
	m, err := procenv.Scrape(s.metrics)
	must(t, err)
	for series, v := range m {
		if strings.HasPrefix(series, "dependency_webhook_index_currency_age_seconds") {
			notes = append(notes, fmt.Sprintf("%s %.1f", series, v))
		}
	}
	return fmt.Sprintf("now %s (MaxInFlight %s): %s", time.Now().Format(time.TimeOnly), inflight.MaxInFlight, strings.Join(notes, "; "))
}

// populateFormer creates n VPCs in the new namespace ns and a VM
// referencing each, and then deletes the VMs: n VPCs that were referenced
// and are not any more.
func (s *setup) populateFormer(ctx context.Context, t *testing.T, ns string, n int) {
	s.populateBulk(ctx, t, ns, n)
	must(t, parallel(n, 16, func(i int) error {
		return s.dyn.Resource(vms).Namespace(ns).Delete(ctx, fmt.Sprintf("vm-%05d", i), metav1.DeleteOptions{})
	}))
	s.waitNone(ctx, t, vms, ns)
}

// bulkOld measures deleting objects created, and last referenced, more than
// oldAge before, with the rule (its references tracked since more than
// oldAge) and without any rule: kubectl delete vpcs --all of allN VPCs that
// nothing references any more (each was referenced by a VM that was
// deleted), rounds times in each phase (and, with the rule, as many
// deletions of Subnets, which no rule protects, in alternation with them),
// and the deletion of a namespace of nsN VPCs and nsN VMs referencing
// them, with the rule where the consumer
// accepted the events claim of the network provider's APIExport and where
// it rejected it (then the webhook cannot ask kcp whether the namespace is
// being deleted, a dry-run Event through that export's virtual workspace,
// and kcp's teardown items are decided like any other DELETE), nsRounds
// times each. Every row compares medians.
func (s *setup) bulkOld(ctx context.Context, t *testing.T, allN, rounds, nsN, nsRounds int) []string {
	// deleteAll deletes every object of resource in ns with kubectl
	// delete --all, then the namespace, and returns how long the kubectl
	// delete took and what kcp measured and the processes used meanwhile.
	deleteAll := func(resource, ns string) bulkDeletion {
		// kubectl's discovery, untimed.
		if out, err := exec.CommandContext(ctx, s.kubectl[0], append(s.kubectl[1:], "get", resource, "-n", ns, "--field-selector=metadata.name=none")...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl get %s -n %s: %v\n%s", resource, ns, err, tail(out))
		}
		kcp0, cpu0, listed0 := s.kcpTimes(ctx, t), s.cpuTimes(ctx, t), s.sum(t, clearerListed)
		s.profileKCP(ctx, t, ns, 3)
		start := time.Now()
		out, err := exec.CommandContext(ctx, s.kubectl[0], append(s.kubectl[1:], "delete", resource, "--all", "-n", ns, "--wait=false")...).CombinedOutput()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("kubectl delete %s --all -n %s: %v\n%s", resource, ns, err, tail(out))
		}
		if deleted := strings.Count(string(out), " deleted"); deleted != allN {
			t.Fatalf("kubectl delete %s --all -n %s deleted %d of %d:\n%s", resource, ns, deleted, allN, tail(out))
		}
		d := bulkDeletion{took: took, cpu: s.cpuTimes(ctx, t).since(cpu0),
			kcp: fmt.Sprintf("%s; the clearer listed %.0f objects meanwhile", s.kcpTimes(ctx, t).sinceOf(kcp0, allN, "DELETE", resource, vms.Resource), s.sum(t, clearerListed)-listed0)}
		s.dropNamespaces(ctx, t, ns)
		return d
	}
	// Every row compares medians: one deletion of 1,000 objects varies by
	// 20% on a busy machine. The --all row takes the median of rounds
	// deletions with the rule against the median of rounds before it and
	// rounds after it. Each phase populates its namespaces together, and
	// they age together. phase names k namespaces of n objects each.
	phase := func(name string, n, k int) []string {
		out := make([]string, k)
		for r := range out {
			out[r] = fmt.Sprintf("%s-%d-%d", name, n, r)
		}
		return out
	}
	// deleteRound deletes the objects of resource in ns as round r, into
	// took and, in the first round, first.
	deleteRound := func(resource, ns string, r int, took []time.Duration, first *bulkDeletion) {
		d := deleteAll(resource, ns)
		if r == 0 {
			*first = d
		}
		took[r] = d.took
	}
	// deleteEach deletes the VPCs of each namespace in turn, and returns
	// how long each deletion took and the first deletion.
	deleteEach := func(namespaces []string) ([]time.Duration, bulkDeletion) {
		took := make([]time.Duration, len(namespaces))
		var first bulkDeletion
		for r, ns := range namespaces {
			deleteRound(vpcs.Resource, ns, r, took, &first)
		}
		return took, first
	}
	// What kcp and the webhook spent on each namespace deletion.
	var nsCosts []string
	const decidedSum, decidedCount = "dependency_webhook_decision_duration_seconds_sum", "dependency_webhook_decision_duration_seconds_count"
	deleteNamespace := func(ns string, first bool) time.Duration {
		cpu0, kcp0, sum0, count0 := s.cpuTimes(ctx, t), s.kcpTimes(ctx, t), s.sum(t, decidedSum), s.sum(t, decidedCount)
		s.profileKCP(ctx, t, ns, 10)
		start := time.Now()
		s.dropNamespaces(ctx, t, ns)
		took := time.Since(start)
		if !first {
			return took
		}
		cost := fmt.Sprintf("%s: %s; kcp served %s", ns, s.cpuTimes(ctx, t).since(cpu0), s.kcpTimes(ctx, t).since(kcp0, 2*nsN, "object"))
		if n := s.sum(t, decidedCount) - count0; n > 0 {
			cost += fmt.Sprintf("; the webhook decided %.0f DELETEs in %.2f ms each", n, 1000*(s.sum(t, decidedSum)-sum0)/n)
		}
		nsCosts = append(nsCosts, cost)
		return took
	}

	// No rule. Both phases hold as many objects in kcp when they delete:
	// the VPCs of kubectl delete --all and nsRounds pairs of namespaces of
	// VPCs and VMs; in each pair, in turn, the first is deleted while the
	// second stays, and then the second. Each namespace row is the median
	// of its nsRounds deletions.
	allFree := phase("old-all-free", allN, rounds)
	nsFree, nsFreeAlone := phase("old-ns-free", nsN, nsRounds), phase("old-ns-free-alone", nsN, nsRounds)
	s.protect(ctx, t, nil)
	for _, ns := range allFree {
		s.populateFormer(ctx, t, ns, allN)
	}
	for r := range nsRounds {
		s.populateBulk(ctx, t, nsFree[r], nsN)
		s.populateBulk(ctx, t, nsFreeAlone[r], nsN)
	}
	waitAged(t, time.Now())
	allFreeTook, allFreeFirst := deleteEach(allFree)
	nsFreeTook, nsFreeAloneTook := make([]time.Duration, nsRounds), make([]time.Duration, nsRounds)
	for r := range nsRounds {
		nsFreeTook[r] = deleteNamespace(nsFree[r], r == 0)
		nsFreeAloneTook[r] = deleteNamespace(nsFreeAlone[r], r == 0)
	}

	// The rule.
	allRule := phase("old-all-rule", allN, rounds)
	nsEvents, nsNoEvents := phase("old-ns-events", nsN, nsRounds), phase("old-ns-noevents", nsN, nsRounds)
	// The twins: as many Subnets, a type of the same provider that no rule
	// protects, created with the VPCs and deleted in alternation with them,
	// so that the drift of the host between phases does not enter the
	// comparison.
	allTwin := phase("old-all-twin", allN, rounds)
	// And the namespaces': as many Subnets and VMs that reference nothing,
	// whose DELETEs call no webhook, deleted in alternation with the
	// namespaces under the rule.
	nsTwin := phase("old-ns-twin", nsN, nsRounds)
	s.protect(ctx, t, s.standard)
	tracked := s.waitTracked(ctx, t, s.standard)
	clearedBefore := s.counter(t, clearancesWritten)
	for r, ns := range allRule {
		s.populateFormer(ctx, t, ns, allN)
		s.createNamespace(ctx, t, allTwin[r])
		createObjects(t, s.dyn, subnets, allTwin[r], allN, func(i int) (string, map[string]any) { return fmt.Sprintf("subnet-%05d", i), map[string]any{} })
	}
	for r := range nsRounds {
		s.populateBulk(ctx, t, nsEvents[r], nsN)
		s.populateBulk(ctx, t, nsNoEvents[r], nsN)
		s.populateTwin(ctx, t, nsTwin[r], nsN)
	}
	populated := time.Now()
	// A first allowed DELETE has the webhook probe kcp's admission for the
	// labelling webhook and the guard of the ledger (in the background):
	// MaxInFlight after they are found in effect, the index can be current
	// past the objects' horizon.
	must(t, s.dyn.Resource(vpcs).Namespace(allRule[0]).Delete(ctx, "vpc-00000", dryRun))
	s.waitIndexed(ctx, t)
	waitAged(t, tracked, populated)
	cleared := s.waitCleared(t, clearedBefore, allN*rounds)

	before := s.decisions(t)
	allRuleTook, allTwinTook := make([]time.Duration, rounds), make([]time.Duration, rounds)
	var allRuleFirst, allTwinFirst bulkDeletion
	for r := range rounds {
		// The order alternates too: the second deletion of a pair may pay
		// for what the first left kcp to do.
		if r%2 == 0 {
			deleteRound(subnets.Resource, allTwin[r], r, allTwinTook, &allTwinFirst)
		}
		deleteRound(vpcs.Resource, allRule[r], r, allRuleTook, &allRuleFirst)
		if r%2 == 1 {
			deleteRound(subnets.Resource, allTwin[r], r, allTwinTook, &allTwinFirst)
		}
	}
	allRuleVia := fmt.Sprintf("%.0f / %s", cleared, s.decisions(t).since(before))
	if cleared+s.counter(t, allowedViaHorizon)-before.horizon < float64(allN*rounds) {
		t.Logf("kubectl delete --all with the rule: not every DELETE cleared or decided via horizon (%s); %s", allRuleVia, s.whyNotHorizon(ctx, t, nsEvents[0], "vpc-00000"))
	}
	// The namespace rows count the clearances written while the namespace
	// was deleted: the elected replica leaves alone the objects of a
	// namespace it knows is being deleted (kcp refused its dry-run Event).
	var eventsCounts, noEventsCounts deletionCounts
	deleteNamespaceCounted := func(ns string, first bool, counts *deletionCounts) time.Duration {
		before, clearedBefore := s.decisions(t), s.counter(t, clearancesWritten)
		took := deleteNamespace(ns, first)
		counts.cleared += s.counter(t, clearancesWritten) - clearedBefore
		counts.decided = counts.decided.plus(s.decisions(t).minus(before))
		return took
	}
	nsEventsTook, nsNoEventsTook, nsTwinTook := make([]time.Duration, nsRounds), make([]time.Duration, nsRounds), make([]time.Duration, nsRounds)
	for r := range nsRounds {
		if r%2 == 0 {
			nsTwinTook[r] = deleteNamespace(nsTwin[r], r == 0)
		}
		nsEventsTook[r] = deleteNamespaceCounted(nsEvents[r], r == 0, &eventsCounts)
		s.claimEvents(ctx, t, false)
		nsNoEventsTook[r] = deleteNamespaceCounted(nsNoEvents[r], r == 0, &noEventsCounts)
		s.claimEvents(ctx, t, true)
		if r%2 == 1 {
			nsTwinTook[r] = deleteNamespace(nsTwin[r], false)
		}
	}
	s.protect(ctx, t, nil)

	// No rule again: kcp's state drifts over a run (its etcd and watch
	// caches hold more history by now), so the --all row compares the rule
	// with the mean of a deletion without it before and one after.
	allFreeAfter := phase("old-all-free-after", allN, rounds)
	for _, ns := range allFreeAfter {
		s.populateFormer(ctx, t, ns, allN)
	}
	waitAged(t, time.Now())
	allFreeAfterTook, allFreeAfterFirst := deleteEach(allFreeAfter)
	allFreeMedian, allRuleMedian := median(append(slices.Clone(allFreeTook), allFreeAfterTook...)), median(allRuleTook)

	rowOf := func(what string, n int, free, rule time.Duration, ratio float64, via string) string {
		return fmt.Sprintf("| %s | %d | %.1f | %.1f | %.2f | %s |", what, n, free.Seconds(), rule.Seconds(), ratio, via)
	}
	row := func(what string, n int, free, rule time.Duration, via string) string {
		return rowOf(what, n, free, rule, rule.Seconds()/free.Seconds(), via)
	}
	// pairedRow compares each deletion with the rule with the twin's
	// deletion made next to it: the two of a pair share the host's state
	// of that moment, so the median of their ratios leaves out more of
	// the drift within a phase than the ratio of the medians does.
	pairedRow := func(what string, n int, twin, rule []time.Duration, via string) string {
		return rowOf(what, n, median(twin), median(rule), pairedRatio(twin, rule), via)
	}
	return []string{fmt.Sprintf("## Deleting old objects (seconds): every object created, and last referenced, more than %s before the deletion, and the rule's references tracked (ReferencesTracked=True) since more than %s", oldAge, oldAge), "",
		"| deletion | N | no rule | with the rule | ratio | with the rule: objects cleared (`--all`: before it; a namespace: while it was deleted) / DELETEs decided via teardown / horizon / revision / live / index / in-flight |",
		"|---|---|---|---|---|---|",
		row(fmt.Sprintf("`kubectl delete vpcs --all` of N VPCs no longer referenced (the VM that referenced each was deleted), the median of %d such deletions; no rule: the median of %d before the rule and %d after it", rounds, rounds, rounds), allN, allFreeMedian, allRuleMedian, allRuleVia),
		row(fmt.Sprintf("the same deletions with the rule against `kubectl delete subnets --all` of N Subnets (a type of the same provider that no rule protects, created with the VPCs) in alternation with them, while the rule is in place; the median of %d each", rounds), allN, median(allTwinTook), allRuleMedian, allRuleVia),
		pairedRow(fmt.Sprintf("same pairs, each deletion with the rule against the Subnets' deletion next to it: the median of the %d ratios", rounds), allN, allTwinTook, allRuleTook, allRuleVia),
		row(fmt.Sprintf("namespace of N VPCs and N VMs referencing them, deleted while a second such namespace stays; the consumer accepted the network provider's events claim; the median of %d", nsRounds), nsN, median(nsFreeTook), median(nsEventsTook), eventsCounts.String()),
		row(fmt.Sprintf("same, the events claim rejected (the webhook cannot ask whether the namespace is being deleted); deleted after the namespace above, as the second namespace without the rule; the median of %d", nsRounds), nsN, median(nsFreeAloneTook), median(nsNoEventsTook), noEventsCounts.String()),
		row(fmt.Sprintf("the namespaces with the rule and the events claim against a twin: a namespace of N Subnets and N VMs that reference nothing (no DELETE in it calls the webhook), populated with them and deleted in alternation with them (first in the first round), while the rule is in place; the median of %d each", nsRounds), nsN, median(nsTwinTook), median(nsEventsTook), eventsCounts.String()),
		row("same, the events claim rejected, against the same twin", nsN, median(nsTwinTook), median(nsNoEventsTook), noEventsCounts.String()),
		pairedRow(fmt.Sprintf("same pairs, each namespace with the rule and the events claim against the twin deleted next to it: the median of the %d ratios", nsRounds), nsN, nsTwinTook, nsEventsTook, eventsCounts.String()),
		"",
		fmt.Sprintf("The namespaces took %s s without the rule and %s s with it and the events claim; the second of each pair %s s without the rule and %s s with it, the claim rejected (objects cleared and decisions: of every deletion); the twins, with the rule in place, %s s.",
			seconds(nsFreeTook), seconds(nsEventsTook), seconds(nsFreeAloneTook), seconds(nsNoEventsTook), seconds(nsTwinTook)),
		fmt.Sprintf("`kubectl delete vpcs --all` took %s s without the rule before it, %s s with the rule (cleared objects: of every deletion) and %s s without the rule after it; `kubectl delete subnets --all`, alternated with those with the rule (the Subnets first in the first round), %s s.",
			seconds(allFreeTook), seconds(allRuleTook), seconds(allFreeAfterTook), seconds(allTwinTook)),
		fmt.Sprintf("What kcp measured during the first `kubectl delete vpcs --all` of each phase, without the rule, before: %s; with the rule: %s; without the rule, after: %s; and during the first `kubectl delete subnets --all`: %s.", allFreeFirst.kcp, allRuleFirst.kcp, allFreeAfterFirst.kcp, allTwinFirst.kcp),
		fmt.Sprintf("CPU used meanwhile (kcp's process_cpu_seconds_total; the others' /proc/<pid>/stat) without the rule, before: %s; with the rule: %s; without the rule, after: %s; the Subnets: %s.", allFreeFirst.cpu, allRuleFirst.cpu, allFreeAfterFirst.cpu, allTwinFirst.cpu),
		fmt.Sprintf("During the first namespace deletion of each kind (CPU as above; kcp's requests for VPCs and VMs and its webhook calls, per object of the namespace; the webhook's time per decision, dependency_webhook_decision_duration_seconds): %s.", strings.Join(nsCosts, ". ")),
		"Cleared: objects the elected replica cleared (dependency_webhook_clearances_total{result=\"cleared\"}), whose DELETE kcp admits without calling the webhook; during a namespace's deletion, a write the deletion makes useless. " +
			"Decisions: dependency_webhook_decisions_total by via (every outcome) and outcome=\"in-flight\" during the deletion; horizon: allowed without reading dependents, the index being current past the object's horizon; " +
			"teardown: an item of kcp's teardown decided from the index once kcp refused a dry-run Event in the namespace; live: dependents read; index: denied from the index (the VM was not deleted yet; kcp retries the item).", ""}
}

// populateTwin creates the namespace ns with n Subnets (subnet-00000 on)
// and n VMs (vm-00000 on) that reference nothing: a namespace of as many
// objects of the same providers as one of populateBulk, none of which the
// rule protects.
func (s *setup) populateTwin(ctx context.Context, t *testing.T, ns string, n int) {
	s.createNamespace(ctx, t, ns)
	createObjects(t, s.dyn, subnets, ns, n, func(i int) (string, map[string]any) { return fmt.Sprintf("subnet-%05d", i), map[string]any{} })
	createObjects(t, s.dyn, vms, ns, n, func(i int) (string, map[string]any) {
		spec := vmSpec("")
		delete(spec, "vpcRef")
		delete(spec, "nics")
		return fmt.Sprintf("vm-%05d", i), spec
	})
}

// bulkDeletion is one kubectl delete --all: how long it took, and what kcp
// measured and the processes used meanwhile.
type bulkDeletion struct {
	took     time.Duration
	kcp, cpu string
}

// claimEvents has the consumer accept (or reject) the events claim of the
// network provider's APIExport in its binding, and waits until a dry-run
// CREATE of an Event in the consumer workspace through that export's
// virtual workspace is accepted (or refused): the webhook's question
// whether a namespace is being deleted.
func (s *setup) claimEvents(ctx context.Context, t *testing.T, accepted bool) {
	t.Helper()
	state := apisv1alpha2.ClaimRejected
	if accepted {
		state = apisv1alpha2.ClaimAccepted
	}
	c := s.cli.Cluster(s.consumer)
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		binding := &apisv1alpha2.APIBinding{}
		if err := c.Get(ctx, client.ObjectKey{Name: vpcs.Group}, binding); err != nil {
			return err
		}
		for i, claim := range binding.Spec.PermissionClaims {
			if claim.Group == "" && claim.Resource == "events" {
				binding.Spec.PermissionClaims[i].State = state
			}
		}
		return c.Update(ctx, binding)
	}))
	events := s.eventsThroughExport(ctx, t)
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Event",
		"metadata":       map[string]any{"generateName": "perf-probe.", "namespace": "default"},
		"involvedObject": map[string]any{"apiVersion": "v1", "kind": "Namespace", "name": "default", "namespace": "default"},
		"reason":         "Probe", "message": "a dry run", "type": "Normal",
	}}
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, last = events.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return (last == nil) == accepted, nil
	}); err != nil {
		t.Fatalf("events claim %s: a dry-run Event through the network provider's virtual workspace still gives %v", state, last)
	}
	t.Logf("events claim %s: a dry-run Event through the network provider's virtual workspace gives %v", state, last)
}

// eventsThroughExport returns the Events of the consumer workspace's
// namespace default as the network provider's APIExport virtual workspace
// serves them, to the admin.
func (s *setup) eventsThroughExport(ctx context.Context, t *testing.T) dynamic.ResourceInterface {
	t.Helper()
	network := rest.CopyConfig(s.env.Config)
	network.Host += s.network.RequestPath()
	dyn, err := dynamic.NewForConfig(network)
	must(t, err)
	slice, err := dyn.Resource(schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexportendpointslices"}).
		Get(ctx, vpcs.Group, metav1.GetOptions{})
	must(t, err)
	endpoints, _, _ := unstructured.NestedSlice(slice.Object, "status", "endpoints")
	if len(endpoints) == 0 {
		t.Fatalf("the APIExportEndpointSlice %s has no endpoints", vpcs.Group)
	}
	url, _, _ := unstructured.NestedString(endpoints[0].(map[string]any), "url")
	lc, err := s.dyn.Resource(schema.GroupVersionResource{Group: "core.kcp.io", Version: "v1alpha1", Resource: "logicalclusters"}).Get(ctx, "cluster", metav1.GetOptions{})
	must(t, err)
	cfg := rest.CopyConfig(s.env.Config)
	cfg.Host = url + logicalcluster.Name(lc.GetAnnotations()[logicalcluster.AnnotationKey]).Path().RequestPath()
	vw, err := dynamic.NewForConfig(cfg)
	must(t, err)
	return vw.Resource(schema.GroupVersionResource{Version: "v1", Resource: "events"}).Namespace("default")
}
