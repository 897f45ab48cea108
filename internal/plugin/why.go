package plugin

import (
	"context"
	"fmt"
	"io"

	"github.com/opendefensecloud/dependency-controller/internal/denial"
)

// WhyResult is the answer of `why`, as -o json|yaml prints it.
type WhyResult struct {
	Object Object `json:"object"`
	denial.Answer
	// Warnings are the warnings of the server's answer (skip-protection,
	// for instance).
	Warnings []string `json:"warnings,omitempty"`
}

// why asks the server, with a dry-run DELETE, what would become of a
// DELETE of t.
func why(ctx context.Context, e *env, t Target) (WhyResult, error) {
	a, err := denial.Read(e.reader.DryRunDelete(ctx, t.Mapping.Resource, t.Namespace, t.Name))
	if err != nil {
		return WhyResult{}, fmt.Errorf("failed to ask whether %s can be deleted: %w", t.describe(), err)
	}
	return WhyResult{Object: t.Object(), Answer: a, Warnings: e.warnings.all()}, nil
}

// printWhy prints the answer of `why` for people.
func printWhy(w io.Writer, t Target, r WhyResult) error {
	for _, warning := range r.Warnings {
		if _, err := fmt.Fprintf(w, "Warning: %s\n", warning); err != nil {
			return err
		}
	}
	var head string
	switch r.Verdict {
	case denial.Allowed:
		head = fmt.Sprintf("deleting %s would be admitted now (dry run)", t.describe())
	case denial.Blocked:
		head = fmt.Sprintf("%s is still referenced by %s", t.describe(), plural(r.Total, "object"))
	case denial.WouldBeDeferred:
		head = fmt.Sprintf("%s is still referenced by %s; under a Replay rule, deleting it would defer its deletion until they are gone", t.describe(), plural(r.Total, "object"))
	case denial.InFlight:
		head = fmt.Sprintf("a reference to %s is being admitted: %s", t.describe(), denial.WebhookMessage(r.Message))
	case denial.Refused:
		head = fmt.Sprintf("deleting %s would be refused, not because of dependents: %s", t.describe(), denial.WebhookMessage(r.Message))
	}
	if _, err := fmt.Fprintf(w, "%s: %s\n", r.Verdict.Banner(), head); err != nil {
		return err
	}
	if len(r.Blockers) > 0 {
		tb := newTable(w, "KIND", "NAMESPACE", "NAME", "RULE", "PATH")
		for _, b := range r.Blockers {
			tb.row(b.Kind, b.Namespace, b.Name, b.Rule, b.Path)
		}
		if err := tb.flush(); err != nil {
			return err
		}
	}
	var tail []string
	if more := r.Total - len(r.Blockers); more > 0 {
		tail = append(tail, fmt.Sprintf("%d more not listed: the denial names at most %d (kubectl dependencies refs lists them all).", more, len(r.Blockers)))
	}
	switch r.Verdict {
	case denial.InFlight:
		retry := "in a few seconds"
		if r.RetryAfterSeconds > 0 {
			retry = fmt.Sprintf("in %ds", r.RetryAfterSeconds)
		}
		tail = append(tail, "Ask again "+retry+": the dependent that references it is stored by then, or its write failed.")
	case denial.Blocked:
		tail = append(tail, "Delete these or remove their references first (kubectl dependencies order plans the deletions).")
	case denial.Refused:
		tail = append(tail, "kubectl dependencies refs shows what references it without deleting.")
	}
	for _, l := range tail {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}
