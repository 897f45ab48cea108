package records

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// FuzzVerify checks that Verify never panics, and that only what the
// keyring itself signed, for exactly the subject it is verified against,
// verifies: whenever Verify succeeds, the annotation decodes to a request
// whose signature is the one the key it names gives that request for that
// subject, and the request is not expired.
func FuzzVerify(f *testing.F) {
	const ttl = 24 * time.Hour
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

	fuzzKeyring := mustKeyring(f, "key-a", "key-b")
	// single signs with one key of fuzzKeyring each: the signature a
	// verified record must carry is the one single[its keyID] gives it.
	single := map[string]*Keyring{
		"key-a": mustKeyring(f, "key-a"),
		"key-b": mustKeyring(f, "key-b"),
	}
	// foreign holds a key of an ID fuzzKeyring knows, with another secret.
	foreign, err := NewKeyring([]Key{{ID: "key-a", Secret: secret('f')}})
	if err != nil {
		f.Fatal(err)
	}

	add := func(s Subject, annotation string) {
		f.Add(annotation, s.Cluster.String(), s.Resource.Group, s.Resource.Resource, s.Namespace, s.Name, string(s.UID))
	}
	clusterScoped := subject
	clusterScoped.Namespace = ""
	clusterScoped.Resource = schema.GroupResource{Resource: "namespaces"}
	reqs := []depv1alpha1.DeletionRequest{
		{User: "alice", RequestedAt: metav1.NewTime(now.Add(-time.Hour)), PropagationPolicy: policy(metav1.DeletePropagationOrphan)},
		{User: "bob", RequestedAt: metav1.NewTime(now.Add(-ttl))},
		{User: "system:admin", RequestedAt: metav1.NewTime(now.Add(-ttl - time.Second))}, // expired
	}
	for _, s := range []Subject{subject, clusterScoped} {
		for _, r := range reqs {
			for _, signer := range []*Keyring{fuzzKeyring, single["key-a"], foreign} {
				a, err := signer.Encode(s, r)
				if err != nil {
					f.Fatal(err)
				}
				add(s, a)
				// Mutations.
				add(s, strings.Replace(a, r.User, r.User+"x", 1))
				add(s, strings.Replace(a, `"key-b"`, `"key-a"`, 1))
				add(s, strings.Replace(a, `"keyID"`, `"keyid"`, 1))
				add(s, strings.Replace(a, `"signature":"`, `"signature":"A`, 1))
				add(s, strings.Replace(a, `Z"`, `+01:00"`, 1))
				add(s, strings.Replace(a, `Z"`, `.5Z"`, 1))
				add(s, a[:len(a)/2])
				add(s, a+" ")
				other := s
				other.UID = "00000000-0000-0000-0000-000000000000"
				add(other, a)
				other = s
				other.Name += "-2"
				add(other, a)
			}
		}
	}
	add(subject, "")
	add(subject, "{}")
	add(subject, "null")
	add(subject, `{"user":"alice","requestedAt":"2026-11-26T10:30:00Z"}`)
	add(subject, `{"user":"a","requestedAt":"2026-11-26T10:30:00Z","uid":"u","keyID":"key-a","signature":"////"}`)

	f.Fuzz(func(t *testing.T, annotation, cluster, group, resource, namespace, name, uid string) {
		s := Subject{
			Cluster:   logicalcluster.Name(cluster),
			Resource:  schema.GroupResource{Group: group, Resource: resource},
			Namespace: namespace,
			Name:      name,
			UID:       types.UID(uid),
		}
		got, err := fuzzKeyring.Verify(s, annotation, now, ttl)
		if err != nil {
			if p := ProblemOf(err); p == "" || !strings.Contains(err.Error(), string(p)) {
				t.Fatalf("Verify returned %T %v, want an *Error with a problem", err, err)
			}
			return
		}

		var decoded depv1alpha1.DeletionRequest
		if err := json.Unmarshal([]byte(annotation), &decoded); err != nil {
			t.Fatalf("Verify accepted %q, which does not decode: %v", annotation, err)
		}
		signer, ok := single[decoded.KeyID]
		if !ok {
			t.Fatalf("Verify accepted %q, signed with key %q, which the keyring does not hold", annotation, decoded.KeyID)
		}
		want := signer.Sign(s, decoded)
		if decoded.Signature != want.Signature {
			t.Fatalf("Verify accepted %q for %+v: its signature %q is not the keyring's %q", annotation, s, decoded.Signature, want.Signature)
		}
		if decoded.UID != s.UID {
			t.Fatalf("Verify accepted %q, written for UID %q, for the object with UID %q", annotation, decoded.UID, s.UID)
		}
		if now.Sub(decoded.RequestedAt.Time) > ttl {
			t.Fatalf("Verify accepted %q, requested at %s, more than %s before %s", annotation, decoded.RequestedAt.Time, ttl, now)
		}
		if got.Signature != decoded.Signature || got.KeyID != decoded.KeyID || got.User != decoded.User || !got.RequestedAt.Equal(&decoded.RequestedAt) {
			t.Fatalf("Verify returned %+v, not the record %+v", got, decoded)
		}
	})
}
