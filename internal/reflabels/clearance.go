package reflabels

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ClearanceFingerprint returns the fingerprint of what can reference the
// objects of target served by the workspace of the logical cluster
// provider: the fingerprints of the schemes under which the dependents of
// every rule that protects target are labelled (one per dependent type).
// The webhook clears an object it finds unreferenced under this
// fingerprint (see inflight.Ledger.Clearance), and the DELETE webhook's
// match condition honours only clearances under the fingerprint of the
// rules as they are now: a rule added, changed or removed ends every
// clearance written before.
func ClearanceFingerprint(provider string, target schema.GroupResource, schemes []string) string {
	schemes = slices.Clone(schemes)
	slices.Sort(schemes)
	schemes = slices.Compact(schemes)
	h := sha256.New()
	_, _ = fmt.Fprintln(h, "clearance/v1")
	_, _ = fmt.Fprintf(h, "target %s %s %s\n", provider, target.Group, target.Resource)
	for _, s := range schemes {
		_, _ = fmt.Fprintf(h, "scheme %s\n", s)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
