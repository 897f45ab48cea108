//go:build perf

// Package perf measures the cost of deletion protection on a real kcp (one
// shard), side by side with kcp's own costs, with the webhook built by `make
// build` running as a process (so that its memory can be read). Its parts
// (MEASURE_ONLY, comma-separated; all by default):
//
//   - single: single DELETEs with 1,000 and 10,000 dependents in the
//     namespace (MEASURE_SINGLE_N): the DELETE of a VPC created a moment
//     before that nothing references, with the rule and without any rule,
//     once before the dependents are labelled with what they reference
//     (the confirming read lists every dependent in scope) and once the
//     rule reports DependentsLabelled=True (two label-selected LISTs); a
//     formerly referenced VPC, a referenced one (denied from the index), a
//     burst of concurrent allowed ones; how the webhook read the
//     dependents for each allowed DELETE (from its metrics); kcp's part of
//     a label-selected read (the LIST made directly, with nothing written
//     before it and right after a VPC's CREATE); the webhook's memory per
//     indexed dependent; and the DELETE of an old VPC (created, and last
//     referenced by a VM since deleted, more than oldAge before, the rule
//     reporting ReferencesTracked=True since as long), which the webhook
//     allows without a read (via="horizon"), against the same DELETE
//     without any rule;
//   - create: a dependent's CREATE with the rule (the labelling webhook and
//     the check of new references) and without any rule, and a label-only
//     UPDATE of a dependent, which kcp sends to the labelling webhook alone;
//   - update: UPDATEs of a protected object that leave the records of
//     deferred deletions alone, with the rule (the guard of records is
//     configured, and kcp evaluates its match condition) and without, and
//     that kcp called the guard for none of them;
//   - race: 500 rounds (MEASURE_RACE_N) of a VM's CREATE and the DELETE of
//     the VPC it references sent at the same moment, with the rule (no VPC
//     may be deleted after the VM was stored: the test fails otherwise)
//     and without any rule;
//   - hot: 10,000 VMs (MEASURE_HOT_N) referencing one VPC created 16 at a
//     time, with the rule (every reference is recorded on that VPC; a
//     client must see no error: the test fails otherwise) and without;
//   - bulk: bulk deletions (kubectl delete --all, and deleting a namespace)
//     with 500, 1,000 and 2,000 targets (MEASURE_BULK_N) and as many
//     dependents referencing them, with the rule and without it, and how
//     the webhook decided the items of the namespace deletion; then the
//     same of old objects (created more than oldAge before):
//     kubectl delete --all of 1,000 VPCs no longer referenced
//     (MEASURE_OLD_ALL_N), the median of 5 such deletions
//     (MEASURE_OLD_ALL_ROUNDS) with the rule against the median of as many
//     without it before the rule and after it (against the drift of kcp's
//     state over a run), and against as many deletions of Subnets, which
//     no rule protects, in alternation with them while the rule is in
//     place (against the drift between phases; also as the median of the
//     pairs' ratios, against the drift within the phase), and namespaces of 2,000 VPCs and VMs
//     referencing them (MEASURE_OLD_NS_N), with the rule where the
//     consumer accepted the network provider's events claim and where it
//     rejected it, the median of 3 of each (MEASURE_OLD_NS_ROUNDS);
//   - stack: a three-level stack of 1,000 objects per level
//     (MEASURE_STACK_N) deleted in one go under Replay rules, against an
//     ordered deletion without rules once before it and once after.
//
// The webhook looks for unlabelled dependents every 30s, as in production
// (procenv's 2s would add a wildcard LIST of every dependent every 2s to the
// measurements with rules); a change of the rules has it look at once.
// Before measuring with rules, protect waits until every rule reports
// DependentsLabelled=True, so that the webhook's relabelling does not run
// during a measurement; single and bulk delete the namespaces they leave
// behind, so that a later change of the rules has few dependents to
// relabel. The allowed DELETE before labelling is held still by revoking
// the compute provider's grant of patch (its webhook-access.yaml) while a
// VirtualMachine from before the rule exists: the webhook cannot relabel
// it, so the rule reports DependentsLabelled=False (AccessDenied) until the
// grant is restored.
//
// Run it with `make measure`; it prints tables (and writes them to
// MEASURE_OUTPUT if set).
package perf

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kcp-dev/logicalcluster/v3"
	clusterclient "github.com/kcp-dev/multicluster-provider/client"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
	"github.com/opendefensecloud/dependency-controller/test/procenv"
)

// The resources of the test providers.
var (
	vpcs, subnets, vms = procenv.VPCs, procenv.Subnets, procenv.VMs
	// newObject returns an object of a test resource to create.
	newObject = procenv.NewObject
)

// dryRun deletes nothing; it passes kcp's admission chain like a DELETE.
var dryRun = metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}

const samples = 30

// burst is how many allowed DELETEs of one namespace are sent at once.
const burst = 16

// relabelInterval is how often the webhook looks for unlabelled dependents:
// the production default.
const relabelInterval = 30 * time.Second

// setup is the measured installation.
type setup struct {
	env        *procenv.Env
	cli        clusterclient.ClusterClient
	dyn        dynamic.Interface // the consumer workspace
	raw        *rest.RESTClient  // the consumer workspace, raw responses
	consumer   logicalcluster.Path
	compute    logicalcluster.Path
	network    logicalcluster.Path
	kubectl    []string // kubectl with the consumer's kubeconfig
	webhook    *kcpenv.Process
	controller *kcpenv.Process
	metrics    string // the webhook's metrics URL

	// standard is the rule that VirtualMachines reference VPCs (Deny).
	standard *protection
	// active is the installed protection, nil for none.
	active *protection
	// seq numbers the objects created to be measured.
	seq int
}

// parts are the parts of the measurement, in the order they run.
var parts = []string{"single", "create", "update", "race", "hot", "bulk", "stack"}

func TestMeasure(t *testing.T) {
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	klog.SetLogger(logr.Discard()) // client-go's throttling notes
	ctx := context.Background()
	run := parts
	if v := os.Getenv("MEASURE_ONLY"); v != "" {
		run = nil
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); !slices.Contains(parts, p) {
				t.Fatalf("MEASURE_ONLY: unknown part %q (parts: %s)", p, strings.Join(parts, ", "))
			}
			run = append(run, strings.TrimSpace(p))
		}
	}
	singleN := sizes(t, "MEASURE_SINGLE_N", 1000, 10000)
	bulkN := sizes(t, "MEASURE_BULK_N", 500, 1000, 2000)
	stackN := sizes(t, "MEASURE_STACK_N", 1000)
	raceN, hotN := size(t, "MEASURE_RACE_N", 500), size(t, "MEASURE_HOT_N", 10000)
	oldAllN, oldAllRounds := size(t, "MEASURE_OLD_ALL_N", 1000), size(t, "MEASURE_OLD_ALL_ROUNDS", 5)
	oldNsN, oldNsRounds := size(t, "MEASURE_OLD_NS_N", 2000), size(t, "MEASURE_OLD_NS_ROUNDS", 3)
	if oldAllRounds < 1 || oldNsRounds < 1 {
		t.Fatalf("MEASURE_OLD_ALL_ROUNDS and MEASURE_OLD_NS_ROUNDS must be at least 1, not %d and %d", oldAllRounds, oldNsRounds)
	}
	s := start(ctx, t)
	var report []string
	for _, part := range parts {
		if !slices.Contains(run, part) {
			continue
		}
		switch part {
		case "single":
			report = append(report, s.singles(ctx, t, singleN)...)
		case "create":
			report = append(report, s.creates(ctx, t)...)
		case "update":
			report = append(report, s.updates(ctx, t)...)
		case "race":
			report = append(report, s.races(ctx, t, raceN)...)
		case "hot":
			report = append(report, s.hots(ctx, t, hotN)...)
		case "bulk":
			report = append(report, "## Bulk deletions (seconds): N targets and N dependents referencing them", "",
				"| N | `kubectl delete vpcs --all`, no rule | same, with the rule (all denied) | namespace, no rule | namespace, with the rule | ratio | namespace with the rule: items decided via teardown / live / index |",
				"|---|---|---|---|---|---|---|")
			for _, n := range bulkN {
				report = append(report, s.bulk(ctx, t, n))
			}
			report = append(report, "", "Items: the webhook's DELETE decisions during the namespace deletion (dependency_webhook_decisions_total by via, every outcome): "+
				"teardown items are decided from the index alone once kcp refuses a dry-run Event in the namespace (it is being deleted); "+
				"live ones read the dependents; index ones were denied from the index (their VM was not deleted yet, and kcp retries them).", "")
			report = append(report, s.bulkOld(ctx, t, oldAllN, oldAllRounds, oldNsN, oldNsRounds)...)
		case "stack":
			report = append(report, s.stacks(ctx, t, stackN)...)
		}
	}

	out := strings.Join(report, "\n")
	t.Logf("\n%s", out)
	if path := os.Getenv("MEASURE_OUTPUT"); path != "" {
		must(t, os.WriteFile(path, []byte(out+"\n"), 0o644))
	}
}

// singles measures single DELETEs with each number of dependents in the
// namespace, and the webhook's memory.
//
// The allowed DELETE of a VPC created a moment before is measured twice:
// before the dependents are labelled, and once they are. To hold the first
// state still, the compute provider's grant of patch to the webhook is
// revoked and a VirtualMachine is created before the rule: the webhook
// cannot relabel it, so the rule reports DependentsLabelled=False
// (AccessDenied) and every confirming read lists all dependents in scope,
// as while the relabeller works through the dependents of a new rule. The
// dependents created under the rule are labelled anyway, by kcp's call of
// the labelling webhook. Then the grant is restored, and the rest is
// measured once the rule reports DependentsLabelled=True.
func (s *setup) singles(ctx context.Context, t *testing.T, sizes []int) []string {
	report := []string{"## Single DELETEs (p50 / p99, ms; dry-run, through kcp's admission chain)", "",
		fmt.Sprintf("| dependents in the namespace | DELETE of a VPC created a moment before, no rule | referenced (denied, from the index) | created a moment before, unreferenced (allowed): before labelling | same, dependents labelled | labelled minus no rule (p50) | formerly referenced (allowed) | %d concurrent unreferenced, whole burst | raw LIST of the dependents |", burst),
		"|---|---|---|---|---|---|---|---|---|"}
	s.protect(ctx, t, nil)
	s.grantPatch(ctx, t, false)
	const unlabelled = "unlabelled"
	s.createNamespace(ctx, t, unlabelled)
	createObjects(t, s.dyn, vms, unlabelled, 1, func(int) (string, map[string]any) { return "vm-unlabelled", vmSpec("none") })
	s.install(ctx, t, s.standard)
	vmRule := s.standard.rules[0]
	// The memory per indexed dependent is read once the dependents are
	// indexed, before the DELETEs below add the garbage of their live reads.
	before := s.memory(t)
	rows := make([]singleRow, len(sizes))
	var populated []time.Time
	for i, n := range sizes {
		rows[i] = singleRow{n: n, ns: fmt.Sprintf("n%d", n)}
		populated = append(populated, s.populateSingle(ctx, t, rows[i].ns, n))
	}
	s.waitIndexed(ctx, t)
	indexed := s.indexed(t)
	after := s.memory(t)

	var notes []string
	if c := s.waitCondition(ctx, t, vmRule); c.Status == metav1.ConditionTrue {
		notes = append(notes, fmt.Sprintf("Before labelling: not measured; the rule %s reported DependentsLabelled=True already (the webhook relabelled before the revoked grant of patch took effect).", vmRule.Name))
	} else {
		notes = append(notes, fmt.Sprintf("Before labelling, the rule %s reported DependentsLabelled=%s (%s): %s", vmRule.Name, c.Status, c.Reason, c.Message))
		for i := range rows {
			rows[i].before, rows[i].beforeReads = s.measureNew(ctx, t, rows[i].ns)
		}
	}
	changed := s.sum(t, "dependency_webhook_labels_total", `result="changed"`)
	restored := time.Now()
	s.grantPatch(ctx, t, true)
	s.waitLabelled(ctx, t, s.standard)
	notes = append(notes, fmt.Sprintf("Once the webhook was granted patch again, the rule reported DependentsLabelled=True after %.1f s (the webhook looks for unlabelled dependents every %s; the labelling webhook changed the labels of %.0f dependents meanwhile).",
		time.Since(restored).Seconds(), relabelInterval, s.sum(t, "dependency_webhook_labels_total", `result="changed"`)-changed))
	s.waitLabelReads(ctx, t, rows[0].ns)
	for i := range rows {
		s.single(ctx, t, &rows[i])
	}
	// The old VPCs: once oldAge has passed since the rule reported
	// ReferencesTracked=True and since they were created and last
	// referenced.
	waitAged(t, append([]time.Time{s.waitTracked(ctx, t, s.standard)}, populated...)...)
	for i := range rows {
		s.singleOld(ctx, t, &rows[i])
	}

	// The baseline: the same DELETE without any rule.
	s.protect(ctx, t, nil)
	for i := range rows {
		row := &rows[i]
		row.baseline, _ = s.measureNew(ctx, t, row.ns)
		kcp0 := s.kcpTimes(ctx, t)
		row.oldBaseline = measure(t, func() error { return s.dyn.Resource(vpcs).Namespace(row.ns).Delete(ctx, "old", dryRun) })
		row.oldBaselineKcp = s.kcpTimes(ctx, t).since(kcp0, samples+2, "DELETE")
		report = append(report, fmt.Sprintf("| %d | %s | %s | %s | %s | %+.1f | %s | %s | %s |", row.n, row.baseline, row.denied, row.before, row.labelled,
			msOf(row.labelled.p50-row.baseline.p50), row.former, row.burst, row.list))
	}
	report = append(report, "")
	for _, row := range rows {
		if row.beforeReads != "" {
			notes = append(notes, fmt.Sprintf("%d dependents, before labelling, per allowed DELETE: %s.", row.n, row.beforeReads))
		}
		notes = append(notes, fmt.Sprintf("%d dependents, labelled, per allowed DELETE: %s.", row.n, row.labelledReads))
		notes = append(notes, fmt.Sprintf("%d dependents: a consistent label-selected LIST of the namespace's VMs that matches none (one of the webhook's two reads, made directly) takes %s ms with nothing written before it, and %s ms right after a VPC's CREATE "+
			"(kcp answers a consistent LIST from its watch cache once that has caught up with etcd's current revision, which a write of another resource moves on; so the LIST waits for a progress notification of the VMs' watch).",
			row.n, row.selected, row.selectedAfterWrite))
		if row.deniedElsewhere > 0 {
			notes = append(notes, fmt.Sprintf("%d dependents: %.0f of the %d denials were not decided from the index.", row.n, row.deniedElsewhere, samples+2))
		}
	}
	report = append(report, notes...)
	report = append(report, "", fmt.Sprintf("## Single DELETEs of old objects (p50 / p99, ms; dry-run): a VPC created, and last referenced (by a VM since deleted), more than %s before, the rule reporting ReferencesTracked=True since more than %s", oldAge, oldAge), "",
		"| dependents in the namespace | no rule | with the rule | with minus no rule (p50) | decided: cleared (no webhook call), or via horizon (no read) |",
		"|---|---|---|---|---|")
	for _, row := range rows {
		how := fmt.Sprintf("via horizon: %.0f of %d", row.oldHorizon, samples+2)
		if row.oldCleared {
			how = fmt.Sprintf("cleared (the webhook decided %.0f)", row.oldHorizon)
		}
		report = append(report, fmt.Sprintf("| %d | %s | %s | %+.1f | %s |", row.n, row.oldBaseline, row.old, msOf(row.old.p50-row.oldBaseline.p50), how))
	}
	report = append(report, "")
	for _, row := range rows {
		report = append(report, fmt.Sprintf("%d dependents: what kcp measured during the DELETEs of the old VPC without a rule: %s; with the rule: %s.", row.n, row.oldBaselineKcp, row.oldKcp))
		if row.oldWhy != "" {
			report = append(report, fmt.Sprintf("%d dependents: %.0f of the %d DELETEs of the old VPC were not decided via horizon; %s.", row.n, samples+2-row.oldHorizon, samples+2, row.oldWhy))
		}
	}
	s.dropNamespaces(ctx, t, unlabelled)
	for _, row := range rows {
		s.dropNamespaces(ctx, t, row.ns)
	}

	perTenK := func(before, after float64) float64 { return (after - before) / float64(indexed) * 10000 / (1 << 20) }
	rss, heap := perTenK(before.rss, after.rss), perTenK(before.heap, after.heap)
	report = append(report, "", "## Webhook memory", "",
		fmt.Sprintf("With %d dependents indexed: RSS %.0f MiB (%.0f MiB before), live Go heap %.0f MiB (%.0f MiB before).",
			indexed, after.rss/(1<<20), before.rss/(1<<20), after.heap/(1<<20), before.heap/(1<<20)),
		fmt.Sprintf("Per 10,000 indexed dependents: %.1f MiB RSS, %.1f MiB live heap; so per 100,000 (extrapolated linearly): %.0f MiB RSS, %.0f MiB live heap.",
			rss, heap, rss*10, heap*10), "")
	return report
}

// start starts kcp, the webhook and the controller and installs the
// topology (see procenv.Start): a network provider (VPCs and Subnets; it
// grants the webhook access to read, record and replay), a compute provider
// (VirtualMachines, which reference VPCs or Subnets; it grants the webhook
// read access and patch to relabel) and a consumer binding both.
func start(ctx context.Context, t *testing.T) *setup {
	e := procenv.Start(ctx, t, procenv.Options{Consumers: []string{"consumer"}, WebhookArgs: []string{"--relabel-interval=" + relabelInterval.String()}})
	c := e.Consumers[0]
	s := &setup{
		env: e, cli: e.Cli, dyn: c.Dyn, raw: c.Raw, consumer: c.Path, compute: e.Compute, network: e.Network,
		kubectl: []string{filepath.Join(kcpenv.RepoRoot(), "bin", "kubectl"), "--kubeconfig", c.Kubeconfig},
		webhook: e.Webhook, controller: e.Controller, metrics: e.WebhookMetrics,
	}
	s.standard = &protection{rules: []*depv1alpha1.DependencyRule{s.rule("vm-to-vpc", vms, vpcs, ".spec.vpcRef.name", depv1alpha1.DeletionPolicyDeny)}}
	return s
}

// populateSingle creates the namespace ns of single with n dependents and
// the VPCs to delete: "protected" (referenced by vm-target), "former"
// (referenced by vm-former until single deletes it), the burst's free-0
// to free-15 (never referenced) and, before the dependents, "old"
// (referenced by vm-old, which is deleted once the dependents are
// created). It returns when "old" was last referenced.
func (s *setup) populateSingle(ctx context.Context, t *testing.T, ns string, n int) time.Time {
	s.createNamespace(ctx, t, ns)
	createObjects(t, s.dyn, vpcs, ns, 1, func(int) (string, map[string]any) { return "old", map[string]any{} })
	createObjects(t, s.dyn, vms, ns, 1, func(int) (string, map[string]any) { return "vm-old", vmSpec("old") })
	referenced := time.Now()
	start := time.Now()
	createObjects(t, s.dyn, vms, ns, n, func(i int) (string, map[string]any) {
		switch i {
		case 0:
			return "vm-target", vmSpec("protected")
		case 1:
			return "vm-former", vmSpec("former")
		}
		return fmt.Sprintf("vm-%05d", i), vmSpec(fmt.Sprintf("vpc-%d", i%50))
	})
	t.Logf("created %d VirtualMachines in %s", n, time.Since(start).Round(time.Second))
	createObjects(t, s.dyn, vpcs, ns, 2+burst, func(i int) (string, map[string]any) {
		if i < 2 {
			return []string{"protected", "former"}[i], map[string]any{}
		}
		return fmt.Sprintf("free-%d", i-2), map[string]any{}
	})
	must(t, s.dyn.Resource(vms).Namespace(ns).Delete(ctx, "vm-old", metav1.DeleteOptions{}))
	return referenced
}

// singleRow is a row of the single DELETEs: p50 / p99 of each column.
type singleRow struct {
	n                                                       int
	ns                                                      string
	baseline, before, labelled, former, denied, burst, list latency
	// selected and selectedAfterWrite are a label-selected LIST of the
	// dependents made directly, with nothing written before it and right
	// after a VPC's CREATE.
	selected, selectedAfterWrite latency
	beforeReads, labelledReads   string
	// deniedElsewhere counts the denials not decided from the index.
	deniedElsewhere float64
	// old and oldBaseline are the DELETE of the old VPC with the rule and
	// without; oldHorizon counts those of the rule decided via horizon,
	// and oldWhy says what they rested on if not all were.
	old, oldBaseline latency
	oldHorizon       float64
	oldWhy           string
	// oldCleared is set when the old VPC carried the webhook's clearance:
	// kcp then calls no webhook for its DELETE.
	oldCleared bool
	// oldKcp and oldBaselineKcp are what kcp measured meanwhile.
	oldKcp, oldBaselineKcp string
}

// singleOld measures the allowed DELETE of the old VPC of the namespace of
// row, under the standard rule, and counts how many the webhook decided
// without a read (via="horizon").
func (s *setup) singleOld(ctx context.Context, t *testing.T, row *singleRow) {
	vpcsIn := s.dyn.Resource(vpcs).Namespace(row.ns)
	// The elected replica clears it within its interval (30s).
	var obj *unstructured.Unstructured
	if err := wait.PollUntilContextTimeout(ctx, time.Second, clearanceWait, true, func(ctx context.Context) (bool, error) {
		var err error
		obj, err = vpcsIn.Get(ctx, "old", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		row.oldCleared = cleared(obj)
		return row.oldCleared, nil
	}); err != nil && obj == nil {
		t.Fatalf("%s/old: %v", row.ns, err)
	}
	t.Logf("%s/old: created %s, ledger of admitted references: %s", row.ns, obj.GetCreationTimestamp().Format(time.TimeOnly),
		describeLedger(obj.GetAnnotations()[depv1alpha1.AnnotationAdmittedReferences]))
	before, kcp0 := s.counter(t, allowedViaHorizon), s.kcpTimes(ctx, t)
	row.old = measure(t, func() error { return vpcsIn.Delete(ctx, "old", dryRun) })
	row.oldKcp = s.kcpTimes(ctx, t).since(kcp0, samples+2, "DELETE")
	if row.oldHorizon = s.counter(t, allowedViaHorizon) - before; !row.oldCleared && row.oldHorizon < samples+2 {
		row.oldWhy = s.whyNotHorizon(ctx, t, row.ns, "old")
		t.Logf("%s/old: %.0f of %d DELETEs decided via horizon; %s", row.ns, row.oldHorizon, samples+2, row.oldWhy)
	}
}

// single measures single DELETEs under the standard rule, its dependents
// labelled, in the namespace of row that populateSingle created.
func (s *setup) single(ctx context.Context, t *testing.T, row *singleRow) {
	vpcsIn := s.dyn.Resource(vpcs).Namespace(row.ns)
	// "former" was referenced: its dependent goes, and the index sees it go.
	must(t, s.dyn.Resource(vms).Namespace(row.ns).Delete(ctx, "vm-former", metav1.DeleteOptions{}))
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last = vpcsIn.Delete(ctx, "former", dryRun)
		return last == nil, nil
	}); err != nil {
		t.Fatalf("the formerly referenced VPC %s/former is still not deletable: %v", row.ns, last)
	}

	const fromIndex = `dependency_webhook_decisions_total{outcome="denied",via="index"}`
	denials, fromIndex0 := s.sum(t, "dependency_webhook_decisions_total", `outcome="denied"`), s.counter(t, fromIndex)
	row.denied = measure(t, func() error {
		err := vpcsIn.Delete(ctx, "protected", dryRun)
		switch {
		case err == nil:
			return fmt.Errorf("the delete of a referenced VPC was allowed")
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "VirtualMachine/"+row.ns+"/vm-target"):
			return fmt.Errorf("expected a denial naming vm-target: %w", err)
		}
		return nil
	})
	row.deniedElsewhere = s.sum(t, "dependency_webhook_decisions_total", `outcome="denied"`) - denials - (s.counter(t, fromIndex) - fromIndex0)
	row.labelled, row.labelledReads = s.measureNew(ctx, t, row.ns)
	selected := func() error {
		_, err := s.raw.Get().AbsPath("apis", vms.Group, vms.Version, "namespaces", row.ns, vms.Resource).
			Param("labelSelector", reflabels.Key(vpcs.GroupResource(), "nothing-references-this")).DoRaw(ctx)
		return err
	}
	row.selected = measure(t, selected)
	row.selectedAfterWrite = measureEach(t, func() error {
		s.seq++
		_, err := vpcsIn.Create(ctx, newObject(vpcs, row.ns, fmt.Sprintf("new-%05d", s.seq), map[string]any{}), metav1.CreateOptions{})
		return err
	}, selected)
	row.former = measure(t, func() error { return vpcsIn.Delete(ctx, "former", dryRun) })
	row.burst = measure(t, func() error {
		return parallel(burst, burst, func(i int) error { return vpcsIn.Delete(ctx, fmt.Sprintf("free-%d", i), dryRun) })
	})
	// The raw LISTs come last: at 10,000 dependents they keep kcp busy for
	// about half a minute, and its garbage collection afterwards would
	// slow the DELETEs measured next.
	row.list = measure(t, func() error {
		_, err := s.raw.Get().AbsPath("apis", vms.Group, vms.Version, "namespaces", row.ns, vms.Resource).DoRaw(ctx)
		return err
	})
}

// measureNew measures the dry-run DELETE of a VPC in ns created a moment
// before (each sample creates one, untimed) that nothing references, and
// returns how the webhook read the dependents for it.
func (s *setup) measureNew(ctx context.Context, t *testing.T, ns string) (latency, string) {
	vpcsIn := s.dyn.Resource(vpcs).Namespace(ns)
	before := s.reads(t)
	var name string
	l := measureEach(t, func() error {
		s.seq++
		name = fmt.Sprintf("new-%05d", s.seq)
		_, err := vpcsIn.Create(ctx, newObject(vpcs, ns, name, map[string]any{}), metav1.CreateOptions{})
		return err
	}, func() error { return vpcsIn.Delete(ctx, name, dryRun) })
	return l, s.reads(t).since(before, samples+2)
}

// waitLabelReads waits until the webhook confirms an allowed DELETE in ns
// with label-selected reads: it has seen the rule report
// DependentsLabelled=True.
func (s *setup) waitLabelReads(ctx context.Context, t *testing.T, ns string) {
	vpcsIn := s.dyn.Resource(vpcs).Namespace(ns)
	must(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		before := s.reads(t)
		s.seq++
		name := fmt.Sprintf("new-%05d", s.seq)
		if _, err := vpcsIn.Create(ctx, newObject(vpcs, ns, name, map[string]any{}), metav1.CreateOptions{}); err != nil {
			return false, err
		}
		if err := vpcsIn.Delete(ctx, name, dryRun); err != nil {
			return false, err
		}
		after := s.reads(t)
		return after.label > before.label && after.list == before.list, nil
	}))
}

// readCounts are the webhook's counts of its live reads of dependents.
type readCounts struct {
	// list, label and index count the reads of a scope: a LIST of every
	// dependent in it, label-selected LISTs, or answered by the index.
	list, label, index float64
	// decisions counts the DELETEs decided with live reads, scanned the
	// dependents they read.
	decisions, scanned float64
	// allowed counts the allowed DELETEs, took the seconds the webhook
	// took to decide them.
	allowed, took float64
}

// reads returns the webhook's counts of live reads.
func (s *setup) reads(t *testing.T) readCounts {
	m, err := procenv.Scrape(s.metrics)
	must(t, err)
	return readCounts{
		list:      m[`dependency_webhook_live_reads_total{how="list"}`],
		label:     m[`dependency_webhook_live_reads_total{how="label"}`],
		index:     m[`dependency_webhook_live_reads_total{how="index"}`],
		decisions: m["dependency_webhook_dependents_scanned_count"],
		scanned:   m["dependency_webhook_dependents_scanned_sum"],
		allowed:   m[`dependency_webhook_decision_duration_seconds_count{outcome="allowed"}`],
		took:      m[`dependency_webhook_decision_duration_seconds_sum{outcome="allowed"}`],
	}
}

// since describes the reads since before, per DELETE of n.
func (c readCounts) since(before readCounts, n int) string {
	per := func(a, b float64) float64 { return (a - b) / float64(n) }
	took := 0.0
	if allowed := c.allowed - before.allowed; allowed > 0 {
		took = 1000 * (c.took - before.took) / allowed
	}
	return fmt.Sprintf("%.1f LISTs of every dependent in scope, %.1f label-selected LISTs, %.1f reads answered by the index, %.1f decisions read live, %.0f dependents read; the webhook took %.1f ms to decide",
		per(c.list, before.list), per(c.label, before.label), per(c.index, before.index), per(c.decisions, before.decisions), per(c.scanned, before.scanned), took)
}

// bulk measures deleting n VPCs referenced by n VMs with kubectl delete
// --all and by deleting their namespace, without the rule and with it.
func (s *setup) bulk(ctx context.Context, t *testing.T, n int) string {
	populate := func(ns string) { s.populateBulk(ctx, t, ns, n) }
	deleteAll := func(ns string, protected bool) string {
		populate(ns)
		if protected {
			s.waitIndexed(ctx, t)
		}
		start := time.Now()
		out, err := exec.CommandContext(ctx, s.kubectl[0], append(s.kubectl[1:], "delete", "vpcs", "--all", "-n", ns, "--wait=false")...).CombinedOutput()
		took := time.Since(start)
		denied := strings.Count(string(out), "is still referenced by")
		switch {
		case protected && denied != n:
			t.Fatalf("kubectl delete --all with the rule: %d of %d denied:\n%s", denied, n, tail(out))
		case !protected && err != nil:
			t.Fatalf("kubectl delete --all without the rule: %v\n%s", err, tail(out))
		}
		return fmt.Sprintf("%.1f", took.Seconds())
	}
	deleteNamespace := func(ns string, protected bool) time.Duration {
		populate(ns)
		if protected {
			s.waitIndexed(ctx, t)
		}
		start := time.Now()
		s.dropNamespaces(ctx, t, ns)
		return time.Since(start)
	}
	decided := func() [3]float64 {
		var out [3]float64
		for i, via := range []string{"teardown", "live", "index"} {
			out[i] = s.sum(t, "dependency_webhook_decisions_total", `via="`+via+`"`)
		}
		return out
	}

	allFree, allProtected := fmt.Sprintf("all-free-%d", n), fmt.Sprintf("all-protected-%d", n)
	s.protect(ctx, t, nil)
	allFreeTook := deleteAll(allFree, false)
	// What kubectl delete --all leaves (the n VMs, and with the rule the n
	// denied VPCs) goes, or every later change of the rules would have the
	// VMs relabelled.
	s.dropNamespaces(ctx, t, allFree)
	nsFree := deleteNamespace(fmt.Sprintf("ns-free-%d", n), false)
	s.protect(ctx, t, s.standard)
	allProtectedTook := deleteAll(allProtected, true)
	before := decided()
	nsProtected := deleteNamespace(fmt.Sprintf("ns-protected-%d", n), true)
	items := decided()
	s.protect(ctx, t, nil)
	s.dropNamespaces(ctx, t, allProtected)
	return fmt.Sprintf("| %d | %s | %s | %.1f | %.1f | %.2f | %.0f / %.0f / %.0f |", n, allFreeTook, allProtectedTook, nsFree.Seconds(), nsProtected.Seconds(),
		nsProtected.Seconds()/nsFree.Seconds(), items[0]-before[0], items[1]-before[1], items[2]-before[2])
}

// populateBulk creates the namespace ns with n VPCs (vpc-00000 on) and a
// VM referencing each (vm-00000 on).
func (s *setup) populateBulk(ctx context.Context, t *testing.T, ns string, n int) {
	s.createNamespace(ctx, t, ns)
	createObjects(t, s.dyn, vpcs, ns, n, func(i int) (string, map[string]any) { return fmt.Sprintf("vpc-%05d", i), map[string]any{} })
	createObjects(t, s.dyn, vms, ns, n, func(i int) (string, map[string]any) {
		return fmt.Sprintf("vm-%05d", i), vmSpec(fmt.Sprintf("vpc-%05d", i))
	})
}

// createNamespace creates a namespace in the consumer workspace.
func (s *setup) createNamespace(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	must(t, s.cli.Cluster(s.consumer).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
}

// dropNamespaces deletes namespaces of the consumer workspace and waits
// until they are gone.
func (s *setup) dropNamespaces(ctx context.Context, t *testing.T, names ...string) {
	t.Helper()
	for _, ns := range names {
		must(t, client.IgnoreNotFound(s.cli.Cluster(s.consumer).Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})))
	}
	must(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, ns := range names {
			if err := s.cli.Cluster(s.consumer).Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	}))
}

// waitIndexed waits until the webhook's index holds every dependent of the
// active rules.
func (s *setup) waitIndexed(ctx context.Context, t *testing.T) {
	want := 0
	for _, gvr := range s.dependents() {
		list, err := s.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		must(t, err)
		want += len(list.Items)
	}
	must(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		return s.indexed(t) >= want, nil
	}))
}

// indexed returns the number of dependents in the webhook's index.
func (s *setup) indexed(t *testing.T) int {
	return int(s.metric(t, "dependency_webhook_indexed_dependents"))
}

// metric returns the value of an unlabelled metric of the webhook.
func (s *setup) metric(t *testing.T, name string) float64 {
	v, ok := s.lookup(t, name)
	if !ok {
		t.Fatalf("no %s in the webhook's metrics", name)
	}
	return v
}

// counter returns the value of a series of the webhook's metrics, written
// as in the exposition format (name{label="value"}), 0 if it is not there
// (a counter that was never incremented).
func (s *setup) counter(t *testing.T, series string) float64 {
	v, _ := s.lookup(t, series)
	return v
}

// sum returns the sum of the series of the webhook's metric name whose
// labels include each of labels (written as in the exposition format:
// via="live"), 0 if there is none.
func (s *setup) sum(t *testing.T, name string, labels ...string) float64 {
	m, err := procenv.Scrape(s.metrics)
	must(t, err)
	total := 0.0
	for series, v := range m {
		rest, ok := strings.CutPrefix(series, name)
		if !ok || rest != "" && !strings.HasPrefix(rest, "{") {
			continue
		}
		if !slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(rest, l) }) {
			total += v
		}
	}
	return total
}

// lookup returns the value of a series of the webhook's metrics.
func (s *setup) lookup(t *testing.T, series string) (float64, bool) {
	m, err := procenv.Scrape(s.metrics)
	must(t, err)
	v, ok := m[series]
	return v, ok
}

// usage is the webhook's memory: its resident set size and its live Go heap
// as of the last garbage collection, in bytes.
type usage struct {
	rss, heap float64
}

// memory returns the webhook's memory, after its runtime had a moment to
// collect garbage and return freed memory.
func (s *setup) memory(t *testing.T) usage {
	time.Sleep(5 * time.Second)
	rss, err := procenv.RSS(s.webhook.Pid())
	must(t, err)
	return usage{rss: rss, heap: s.metric(t, "go_gc_heap_live_bytes")}
}

func vmSpec(vpc string) map[string]any {
	return map[string]any{"cpu": 4, "memory": "8Gi", "image": "registry.example/os:1.2.3",
		"vpcRef": map[string]any{"name": vpc}, "nics": []any{map[string]any{"name": "eth0", "vpc": vpc}}}
}

// createObjects creates n objects of gvr in ns with 16 workers; object i
// gets the name and spec of gen(i).
func createObjects(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns string, n int, gen func(i int) (string, map[string]any)) {
	t.Helper()
	must(t, parallel(n, 16, func(i int) error {
		name, spec := gen(i)
		_, err := dyn.Resource(gvr).Namespace(ns).Create(context.Background(), newObject(gvr, ns, name, spec), metav1.CreateOptions{})
		return err
	}))
}

// parallel calls f(0) to f(n-1) with the given number of workers and returns
// the first error.
func parallel(n, workers int, f func(i int) error) error {
	work := make(chan int)
	var (
		wg    sync.WaitGroup
		lock  sync.Mutex
		first error
	)
	for range workers {
		wg.Go(func() {
			for i := range work {
				if err := f(i); err != nil {
					lock.Lock()
					first = cmp.Or(first, err)
					lock.Unlock()
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}

// size returns the number of the environment variable name, or def if it
// is unset.
func size(t *testing.T, name string, def int) int {
	return sizes(t, name, def)[0]
}

// sizes returns the comma-separated numbers of the environment variable
// name, or defaults if it is unset.
func sizes(t *testing.T, name string, defaults ...int) []int {
	v := os.Getenv(name)
	if v == "" {
		return defaults
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		must(t, err)
		out = append(out, n)
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// latency is the p50 and p99 of a measurement; the zero value is one not
// made.
type latency struct {
	p50, p99 time.Duration
}

// String returns "p50 / p99" in milliseconds, "–" if not measured.
func (l latency) String() string {
	if l == (latency{}) {
		return "–"
	}
	return fmt.Sprintf("%.1f / %.1f", msOf(l.p50), msOf(l.p99))
}

// msOf returns d in milliseconds.
func msOf(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// measure runs f twice to warm up, then samples times, and returns its p50
// and p99.
func measure(t *testing.T, f func() error) latency {
	t.Helper()
	return measureEach(t, nil, f)
}

// measureEach is measure with prepare (if set) called before each call of
// f, untimed.
func measureEach(t *testing.T, prepare, f func() error) latency {
	t.Helper()
	var d []time.Duration
	for i := range samples + 2 {
		if prepare != nil {
			must(t, prepare())
		}
		start := time.Now()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		if i >= 2 {
			d = append(d, time.Since(start))
		}
	}
	slices.Sort(d)
	return latency{p50: d[len(d)/2], p99: d[len(d)*99/100]}
}

func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}
