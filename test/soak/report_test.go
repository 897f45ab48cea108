//go:build soak

package soak

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
	"github.com/opendefensecloud/dependency-controller/test/procenv"
)

// sample is what was read at one moment of the churn.
type sample struct {
	at    time.Duration
	phase string
	// webhookRSS, webhookHeap (live Go heap), controllerRSS and kcpRSS in
	// bytes; kcpRSS is 0 if kcp's process was not found.
	webhookRSS, webhookHeap, controllerRSS, kcpRSS float64
	webhookGoroutines, controllerGoroutines        float64
	// indexed is the number of dependents in the webhook's index.
	indexed float64
	// denied and allowed are the latencies of the DELETEs of targets since
	// the previous sample.
	denied, allowed []time.Duration
	wrong           int
	load            string
}

// sampler takes samples.
type sampler struct {
	s       *soak
	start   time.Time
	kcpPid  int
	samples []sample
}

func newSampler(s *soak, start time.Time) *sampler {
	return &sampler{s: s, start: start, kcpPid: findChild("kcp")}
}

// take takes a sample; a process that exited or cannot be read fails the
// test.
func (sm *sampler) take(t *testing.T) {
	e := sm.s.env
	x := sample{at: time.Since(sm.start).Round(time.Second), phase: sm.s.rules.view().phase, load: loadAverage()}
	for _, p := range []struct {
		proc       *kcpenv.Process
		metrics    string
		rss        *float64
		goroutines *float64
	}{{e.Webhook, e.WebhookMetrics, &x.webhookRSS, &x.webhookGoroutines}, {e.Controller, e.ControllerMetrics, &x.controllerRSS, &x.controllerGoroutines}} {
		if !p.proc.Running() {
			t.Errorf("the %s exited after %s; log:\n%s", p.proc.Name, x.at, p.proc.LogTail(30))
			continue
		}
		rss, err := procenv.RSS(p.proc.Pid())
		if err != nil {
			t.Errorf("reading the RSS of the %s: %v", p.proc.Name, err)
		}
		*p.rss = rss
		m, err := procenv.Scrape(p.metrics)
		if err != nil {
			t.Errorf("reading the metrics of the %s: %v", p.proc.Name, err)
			continue
		}
		*p.goroutines = m["go_goroutines"]
		if p.proc == e.Webhook {
			x.webhookHeap = m["go_gc_heap_live_bytes"]
			x.indexed = m["dependency_webhook_indexed_dependents"]
		}
	}
	if sm.kcpPid != 0 {
		x.kcpRSS, _ = procenv.RSS(sm.kcpPid)
	}
	x.denied, x.allowed, x.wrong = sm.s.stats.interval()
	sm.samples = append(sm.samples, x)
}

// findChild returns the PID of a child process of this one with the given
// command name, 0 if there is none.
func findChild(comm string) int {
	self := strconv.Itoa(os.Getpid())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if s[open+1:end] == comm && len(f) > 1 && f[1] == self {
			pid, _ := strconv.Atoi(strings.TrimSpace(s[:open]))
			return pid
		}
	}
	return 0
}

// reportInfo is what the report needs besides the samples.
type reportInfo struct {
	started               time.Time
	churned               time.Duration
	loadBefore, loadAfter string
	leftovers             []string
	indexed, existing     int
	// creators are the goroutines of each process at the end, by the
	// function that started them.
	creators map[string]map[string]int
}

type report struct {
	lines, failures []string
}

const (
	// rssLimit is how much RSS may grow after warm-up.
	rssLimit = 0.10
	// goroutineSlack is how many goroutines the lowest count of the last
	// third after warm-up may exceed that of the first third by (at least
	// goroutineMin) before a steady rise counts as growth.
	goroutineSlack = 0.05
	goroutineMin   = 5
)

func mib(b float64) string { return fmt.Sprintf("%.1f", b/(1<<20)) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }

// percentiles returns "p50 / p99" in milliseconds, "-" without any.
func percentiles(d []time.Duration) string {
	if len(d) == 0 {
		return "-"
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return ms(d[len(d)/2]) + " / " + ms(d[len(d)*99/100])
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// thirds splits xs into a first, middle and last third (the middle may be
// empty, the others hold at least one value).
func thirds(xs []float64) (first, middle, last []float64) {
	n := max(1, len(xs)/3)
	return xs[:n], xs[n : len(xs)-n], xs[len(xs)-n:]
}

// report renders the table over time and the summary, and returns the
// failures.
func (s *soak) report(sm *sampler, info reportInfo) report {
	var r report
	add := func(format string, args ...any) { r.lines = append(r.lines, fmt.Sprintf(format, args...)) }
	fail := func(format string, args ...any) { r.failures = append(r.failures, fmt.Sprintf(format, args...)) }
	cfg := s.cfg
	host, _ := os.Hostname()
	add("## Soak: %s, %s of churn", info.started.Format("2006-01-02 15:04 MST"), info.churned.Round(time.Second))
	add("")
	add("Machine: %s, %d CPUs, single-shard kcp; load average (1, 5, 15 min) %s at the start, %s at the end.", host, runtime.NumCPU(), info.loadBefore, info.loadAfter)
	add("Configuration: 2 tenants, %d churn workers and a dry-run checker each, %d base VMs per tenant, rules changed every %s, a sample every %s, warm-up %s; binaries from %s.",
		cfg.workers, cfg.base, cfg.rulePeriod, cfg.sample, (cfg.duration / 3).Round(time.Second), procenv.BinDir())
	add("")
	add("### Over time")
	add("")
	add("| min | rules | webhook RSS MiB | webhook live heap MiB | webhook goroutines | controller RSS MiB | controller goroutines | kcp RSS MiB | indexed dependents | DELETEs denied / allowed | denied p50 / p99 ms | allowed p50 / p99 ms | wrong | load (1 min) |")
	add("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, x := range sm.samples {
		kcp := "?"
		if x.kcpRSS > 0 {
			kcp = fmt.Sprintf("%.0f", x.kcpRSS/(1<<20))
		}
		add("| %.1f | %s | %s | %s | %.0f | %s | %.0f | %s | %.0f | %d / %d | %s | %s | %d | %s |",
			x.at.Minutes(), x.phase, mib(x.webhookRSS), mib(x.webhookHeap), x.webhookGoroutines, mib(x.controllerRSS), x.controllerGoroutines,
			kcp, x.indexed, len(x.denied), len(x.allowed), percentiles(x.denied), percentiles(x.allowed), x.wrong, strings.Fields(x.load + " ?")[0])
	}
	add("")
	add("### Summary")
	add("")

	// After warm-up.
	warm := cfg.duration / 3
	var post []sample
	for _, x := range sm.samples {
		if x.at >= warm {
			post = append(post, x)
		}
	}
	series := func(f func(sample) float64) []float64 {
		out := make([]float64, len(post))
		for i, x := range post {
			out[i] = f(x)
		}
		return out
	}
	if len(post) < 3 {
		add("- Only %d samples after warm-up (%s): too few to judge memory and goroutines.", len(post), warm.Round(time.Second))
	} else {
		add("- After warm-up: %d samples from minute %.1f on.", len(post), post[0].at.Minutes())
		for _, p := range []struct {
			name string
			rss  func(sample) float64
		}{{"webhook", func(x sample) float64 { return x.webhookRSS }}, {"controller", func(x sample) float64 { return x.controllerRSS }}} {
			xs := series(p.rss)
			lo, hi := slices.Min(xs), slices.Max(xs)
			first, _, last := thirds(xs)
			growth := median(last)/median(first) - 1
			within := "yes"
			if hi > lo*(1+rssLimit) {
				within = "no"
			}
			add("- %s RSS after warm-up: min %s MiB, max %s MiB (max/min %+.1f%%; within 10%%: %s); median of the first third %s MiB, of the last third %s MiB: %+.1f%%.",
				p.name, mib(lo), mib(hi), 100*(hi/lo-1), within, mib(median(first)), mib(median(last)), 100*growth)
			if growth > rssLimit {
				fail("the %s's RSS grew by %.1f%% after warm-up (median of the last third %s MiB against %s MiB in the first third; limit %.0f%%)",
					p.name, 100*growth, mib(median(last)), mib(median(first)), 100*rssLimit)
			}
		}
		for _, p := range []struct {
			name string
			g    func(sample) float64
		}{{"webhook", func(x sample) float64 { return x.webhookGoroutines }}, {"controller", func(x sample) float64 { return x.controllerGoroutines }}} {
			xs := series(p.g)
			first, middle, last := thirds(xs)
			m1, m3 := slices.Min(first), slices.Min(last)
			m2 := m1
			if len(middle) > 0 {
				m2 = slices.Min(middle)
			}
			add("- %s goroutines after warm-up: first %.0f, last %.0f, min %.0f, max %.0f; lowest per third %.0f / %.0f / %.0f.",
				p.name, xs[0], xs[len(xs)-1], slices.Min(xs), slices.Max(xs), m1, m2, m3)
			if m1 <= m2 && m2 <= m3 && m3-m1 > max(goroutineMin, goroutineSlack*m1) {
				fail("the %s's goroutines grew steadily after warm-up: the lowest count per third rose %.0f / %.0f / %.0f", p.name, m1, m2, m3)
			}
		}
		idx := series(func(x sample) float64 { return x.indexed })
		add("- Index after warm-up: %.0f to %.0f dependents (first %.0f, last %.0f).", slices.Min(idx), slices.Max(idx), idx[0], idx[len(idx)-1])
	}
	add("- Index at the end, once the churn stopped: %d dependents for %d VMs.", info.indexed, info.existing)
	if info.indexed != info.existing {
		fail("at the end the index holds %d dependents, but %d VMs exist", info.indexed, info.existing)
	}

	st := s.stats
	st.lock.Lock()
	defer st.lock.Unlock()
	add("- Latency (client-side, every DELETE of a VPC or Subnet, dry runs included, by its answer; deferred counts as denied), p50 / p99 ms: denied %s (%d), allowed %s (%d).",
		percentiles(st.allDenied), len(st.allDenied), percentiles(st.allAllowed), len(st.allAllowed))
	add("- Operations: %d rounds, %d creates, %d updates (a VM's reference changed), %d VM deletes.", st.counts["rounds"], st.counts["creates"], st.counts["updates"], st.counts["VM deletes"])
	add("- Unreferenced targets denied at first and allowed on a retry (the index had not seen the reference go yet): %d.", st.counts["unreferenced deletes denied at first (index behind)"])
	add("")
	add("| DELETEs of | denied | deferred | allowed | gone | error |")
	add("|---|---|---|---|---|---|")
	for _, what := range slices.Sorted(maps.Keys(st.deletes)) {
		row := "| " + what
		for _, a := range answers {
			row += fmt.Sprintf(" | %d", st.deletes[what][a])
		}
		add("%s |", row)
	}
	add("")
	var took []time.Duration
	var changeFailures []string
	for _, c := range s.rules.changes {
		took = append(took, c.took)
		if c.err != nil {
			changeFailures = append(changeFailures, fmt.Sprintf("at %s, %q to %q: %v", c.at.Round(time.Second), c.from, c.to, c.err))
		}
	}
	if len(took) > 0 {
		add("- Rule changes: %d (the first before the churn); in force after %s (median), %s (longest).",
			len(took), slices.Sorted(slices.Values(took))[len(took)/2].Round(100*time.Millisecond), slices.Max(took).Round(100*time.Millisecond))
	}
	for _, f := range changeFailures {
		fail("a rule change did not take effect: %s", f)
	}
	add("- Wrong decisions: %d.", len(st.wrong))
	for i, w := range st.wrong {
		if i == 20 {
			add("  - and %d more", len(st.wrong)-20)
			break
		}
		add("  - %s", w)
	}
	if len(st.wrong) > 0 {
		fail("%d wrong decisions, the first: %s", len(st.wrong), st.wrong[0])
	}
	if len(st.uncounted) == 0 {
		add("- Decisions during rule changes that would have been wrong with the rules settled (not counted): none.")
	} else {
		add("- Decisions during rule changes that would have been wrong with the rules settled (not counted):")
		for _, k := range slices.Sorted(maps.Keys(st.uncounted)) {
			add("  - %s: %d", k, st.uncounted[k])
		}
	}
	if len(st.errors) == 0 {
		add("- Failed requests: none.")
	} else {
		total := 0
		for _, n := range st.errors {
			total += n
		}
		add("- Failed requests: %d.", total)
		keys := slices.SortedFunc(maps.Keys(st.errors), func(a, b string) int { return cmp.Or(cmp.Compare(st.errors[b], st.errors[a]), cmp.Compare(a, b)) })
		for _, k := range keys {
			add("  - %s: %d", k, st.errors[k])
		}
		for _, e := range st.errorExamples {
			add("  - e.g. %s", e)
		}
	}
	if len(info.leftovers) > 0 {
		add("- Left behind in the workers' namespaces: %s.", strings.Join(info.leftovers, ", "))
		fail("%d objects were left behind in the workers' namespaces: %s", len(info.leftovers), strings.Join(info.leftovers, ", "))
	}
	for _, name := range []string{"webhook", "controller"} {
		c := info.creators[name]
		if c == nil {
			continue
		}
		total := 0
		for _, n := range c {
			total += n
		}
		keys := slices.SortedFunc(maps.Keys(c), func(a, b string) int { return cmp.Or(cmp.Compare(c[b], c[a]), cmp.Compare(a, b)) })
		var top []string
		for i, k := range keys {
			if i == 8 {
				break
			}
			top = append(top, fmt.Sprintf("%d %s", c[k], k))
		}
		add("- %s goroutines at the end (a dump): %d; by the function that started them: %s.", name, total, strings.Join(top, ", "))
	}
	if len(r.failures) == 0 {
		add("- Verdict: passed.")
	} else {
		add("- Verdict: FAILED:")
		for _, f := range r.failures {
			add("  - %s", f)
		}
	}
	return r
}
