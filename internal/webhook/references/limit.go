package references

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// DefaultMaxReferences is how many objects one dependent may reference
// under the rules of its type unless configured otherwise (the webhook's
// --max-references-per-object). Every reference a write adds is recorded
// on the object it names, a write through the protected provider's
// virtual workspace each, before kcp's timeout for the webhook runs out
// (the budget: 4 s by default), and kcp's writes are what bounds it: a kcp
// on two cores, busy with other work, writes 100 to 250 marks a second
// (see docs/operations.md, "How many references one object may hold").
// It is also the number of references for which a dependent carries a
// label each (reflabels.MaxReferences). A write that adds references to a
// dependent and leaves it with more is refused at once (403), rather than
// failing with "retry" on every try.
const DefaultMaxReferences = reflabels.MaxReferences

// limit is the check of the number of references of one dependent.
type limit struct {
	max int
}

// check returns the response that refuses a write that adds references
// to the dependent kind named name and leaves it with f.total, if that is
// past the limit, or else the warnings of the write (close to the limit,
// see reflabels.NearLimit).
// A write that adds no reference is never refused: one that removes some
// from a dependent past the limit (created before the limit, or under a
// larger one) must go through.
func (l limit) check(kind, name string, f findings) (*admission.Response, []string) {
	if !f.adds {
		return nil, nil
	}
	if f.total > l.max {
		resp := admission.Denied(fmt.Sprintf("%s %q would reference %d objects; one object may reference at most %d under the dependency rules of its type "+
			"(each new reference is checked within the webhook's timeout): reference fewer, e.g. by splitting them over several objects",
			kind, name, f.total, l.max))
		resp.AuditAnnotations = map[string]string{webhook.AuditDecision: webhook.DecisionDenied}
		return &resp, nil
	}
	if reflabels.NearLimit(f.total, l.max) {
		return nil, []string{fmt.Sprintf("%s %q references %d objects; one object may reference at most %d under the dependency rules, and a write that adds references past that is refused",
			kind, name, f.total, l.max)}
	}
	return nil, nil
}
