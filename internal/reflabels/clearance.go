package reflabels

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ClearanceFingerprint returns the fingerprint of what can reference the
// objects of target served by the workspace of the logical cluster
// provider: the schemes under which the dependents of every rule that
// protects target are labelled (one per dependent type). The webhook
// clears an object it finds unreferenced under this fingerprint (see
// inflight.Ledger.Clearance) and labels it with it
// (api/v1alpha1.LabelCleared), and the DELETE webhook's object selector
// honours only the fingerprints of the rules as they are now: a rule
// added, changed or removed ends every clearance written before.
//
// The fingerprint covers the schemes' salts, which nobody sees who cannot
// read the rules: a value set on an object before the guard of the label
// was in effect (by an earlier release, or before a rule protected the
// type) cannot be a fingerprint the selector honours.
func ClearanceFingerprint(provider string, target schema.GroupResource, schemes []Scheme) string {
	schemes = slices.Clone(schemes)
	compare := func(a, b Scheme) int {
		return cmp.Or(cmp.Compare(a.Fingerprint, b.Fingerprint), cmp.Compare(a.Salt, b.Salt))
	}
	slices.SortFunc(schemes, compare)
	schemes = slices.CompactFunc(schemes, func(a, b Scheme) bool { return compare(a, b) == 0 })
	h := sha256.New()
	_, _ = fmt.Fprintln(h, "clearance/v2")
	_, _ = fmt.Fprintf(h, "target %s %s %s\n", provider, target.Group, target.Resource)
	for _, s := range schemes {
		_, _ = fmt.Fprintf(h, "scheme %s %s\n", s.Fingerprint, s.Salt)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// IsClearanceFingerprint reports whether s has the form of a clearance
// fingerprint: 16 lowercase hexadecimal digits.
func IsClearanceFingerprint(s string) bool {
	_, err := hex.DecodeString(s)
	return len(s) == 16 && err == nil && strings.ToLower(s) == s
}
