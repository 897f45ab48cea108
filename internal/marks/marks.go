// Package marks computes the values of the unreferenced label
// (depv1alpha1.LabelUnreferenced) that both binaries agree on: the webhook
// writes them on protected objects it proved unreferenced, the controller
// excludes objects carrying them from the DELETE webhook with an object
// selector. A value is tied to the exact set of rules that protect a
// resource, so that adding, changing or deleting any of those rules makes
// every earlier value stop matching. See docs/architecture.md, "Marks".
package marks

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// Rule is what a fingerprint covers of one rule that protects a resource.
type Rule struct {
	// Cluster is the logical cluster of the rule.
	Cluster logicalcluster.Name
	// Name is the rule's name.
	Name string
	// UID is the rule's UID: a rule recreated under the same name is
	// another rule.
	UID types.UID
	// Generation is the rule's metadata.generation: every change of its
	// spec is another rule.
	Generation int64
}

// RuleOf returns what a fingerprint covers of rule.
func RuleOf(rule *depv1alpha1.DependencyRule) Rule {
	return Rule{Cluster: logicalcluster.From(rule), Name: rule.Name, UID: rule.UID, Generation: rule.Generation}
}

// fingerprintLen is the number of hex digits of a fingerprint (64 bits).
const fingerprintLen = 16

// Fingerprint returns the fingerprint of a protected resource (served by the
// provider workspace of logical cluster cluster) and the rules that protect
// it, in any order: 16 hex digits of a SHA-256 over the resource and the
// sorted rules. Duplicates count once.
func Fingerprint(cluster logicalcluster.Name, resource schema.GroupResource, rules []Rule) string {
	sorted := slices.Clone(rules)
	slices.SortFunc(sorted, func(a, b Rule) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID), cmp.Compare(a.Generation, b.Generation))
	})
	sorted = slices.Compact(sorted)
	var b strings.Builder
	// Every field is quoted, so that no two inputs render alike.
	fmt.Fprintf(&b, "%q %q %q\n", cluster, resource.Group, resource.Resource)
	for _, r := range sorted {
		fmt.Fprintf(&b, "%q %q %q %d\n", r.Cluster, r.Name, r.UID, r.Generation)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])[:fingerprintLen]
}

// Pending returns the label value of a proof in progress for fingerprint fp.
func Pending(fp string) string {
	return depv1alpha1.UnreferencedPendingPrefix + fp
}

// IsPending reports whether value is the label value of a proof in
// progress, of any fingerprint.
func IsPending(value string) bool {
	return strings.HasPrefix(value, depv1alpha1.UnreferencedPendingPrefix)
}
