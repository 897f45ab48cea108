package records

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// secret returns a valid secret of MinKeyLength bytes, all b.
func secret(b byte) []byte {
	return bytes.Repeat([]byte{b}, MinKeyLength)
}

// mustKeyring returns a keyring of the keys with the given IDs, each with a
// secret derived from its ID (so that a key ID always names the same
// secret, in every keyring of a test).
func mustKeyring(t testing.TB, ids ...string) *Keyring {
	t.Helper()
	var keys []Key
	for _, id := range ids {
		keys = append(keys, Key{ID: id, Secret: secretFor(id)})
	}
	k, err := NewKeyring(keys)
	if err != nil {
		t.Fatalf("NewKeyring(%v): %v", ids, err)
	}
	return k
}

// secretFor derives a secret of MinKeyLength bytes from id.
func secretFor(id string) []byte {
	return []byte(fmt.Sprintf("%-*s", MinKeyLength, "secret-of-"+id))
}

func policy(p metav1.DeletionPropagation) *metav1.DeletionPropagation {
	return &p
}

var (
	requestedAt = time.Date(2026, 11, 26, 10, 30, 0, 0, time.UTC)

	subject = Subject{
		Cluster:   logicalcluster.Name("root:org:team"),
		Resource:  schema.GroupResource{Group: "networking.example.com", Resource: "vpcs"},
		Namespace: "default",
		Name:      "vpc-1",
		UID:       types.UID("11111111-1111-1111-1111-111111111111"),
	}

	request = depv1alpha1.DeletionRequest{
		User:              "alice",
		RequestedAt:       metav1.NewTime(requestedAt),
		PropagationPolicy: policy(metav1.DeletePropagationForeground),
	}
)

// encode signs req for s with k, failing the test on error.
func encode(t testing.TB, k *Keyring, s Subject, req depv1alpha1.DeletionRequest) string {
	t.Helper()
	a, err := k.Encode(s, req)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return a
}

// edit decodes the annotation into a generic map, lets fn change it and
// encodes it again.
func edit(t testing.TB, annotation string, fn func(m map[string]any)) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(annotation), &m); err != nil {
		t.Fatalf("decoding %s: %v", annotation, err)
	}
	fn(m)
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("encoding: %v", err)
	}
	return string(raw)
}

func wantProblem(t *testing.T, err error, want Problem) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("Verify failed: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("Verify succeeded, want problem %q", want)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Verify returned %T (%v), want *Error", err, err)
	}
	if e.Problem != want {
		t.Fatalf("Verify: problem %q (%v), want %q", e.Problem, err, want)
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	k := mustKeyring(t, "key-1")
	clusterScoped := subject
	clusterScoped.Namespace = ""
	core := subject
	core.Resource = schema.GroupResource{Resource: "configmaps"}

	withoutPolicy := request
	withoutPolicy.PropagationPolicy = nil
	subSecond := request
	subSecond.RequestedAt = metav1.NewTime(requestedAt.Add(750 * time.Millisecond))
	otherZone := request
	otherZone.RequestedAt = metav1.NewTime(requestedAt.In(time.FixedZone("UTC+5", 5*3600)))
	stale := request // fields that Sign must overwrite
	stale.UID = "stale-uid"
	stale.KeyID = "stale-key"
	stale.Signature = "c3RhbGU="
	unicodeUser := request
	unicodeUser.User = `system:serviceaccount:ns:sä "quoted"`

	for _, tc := range []struct {
		name    string
		subject Subject
		request depv1alpha1.DeletionRequest
	}{
		{"namespaced", subject, request},
		{"cluster-scoped", clusterScoped, request},
		{"core group", core, request},
		{"without propagation policy", subject, withoutPolicy},
		{"sub-second time", subject, subSecond},
		{"time in another zone", subject, otherZone},
		{"stale uid, key and signature are overwritten", subject, stale},
		{"unicode and quotes in user", subject, unicodeUser},
	} {
		t.Run(tc.name, func(t *testing.T) {
			signed := k.Sign(tc.subject, tc.request)
			if signed.UID != tc.subject.UID {
				t.Errorf("Sign: UID %q, want %q", signed.UID, tc.subject.UID)
			}
			if signed.KeyID != "key-1" {
				t.Errorf("Sign: KeyID %q, want key-1", signed.KeyID)
			}
			sig, err := base64.StdEncoding.DecodeString(signed.Signature)
			if err != nil || len(sig) != 32 {
				t.Errorf("Sign: signature %q is not base64 of 32 bytes (%v)", signed.Signature, err)
			}
			if again := k.Sign(tc.subject, tc.request); again.Signature != signed.Signature {
				t.Errorf("Sign is not deterministic: %q, then %q", signed.Signature, again.Signature)
			}

			annotation := encode(t, k, tc.subject, tc.request)
			got, err := k.Verify(tc.subject, annotation, requestedAt.Add(time.Minute), time.Hour)
			wantProblem(t, err, "")
			if got.User != tc.request.User {
				t.Errorf("User %q, want %q", got.User, tc.request.User)
			}
			if want := tc.request.RequestedAt.Truncate(time.Second); !got.RequestedAt.Time.Equal(want) {
				t.Errorf("RequestedAt %s, want %s", got.RequestedAt.Time, want)
			}
			switch {
			case tc.request.PropagationPolicy == nil && got.PropagationPolicy != nil:
				t.Errorf("PropagationPolicy %q, want none", *got.PropagationPolicy)
			case tc.request.PropagationPolicy != nil && (got.PropagationPolicy == nil || *got.PropagationPolicy != *tc.request.PropagationPolicy):
				t.Errorf("PropagationPolicy %v, want %q", got.PropagationPolicy, *tc.request.PropagationPolicy)
			}
			if got.UID != tc.subject.UID || got.KeyID != "key-1" || got.Signature != signed.Signature {
				t.Errorf("Verify returned uid %q key %q signature %q, want %q, key-1, %q", got.UID, got.KeyID, got.Signature, tc.subject.UID, signed.Signature)
			}
		})
	}
}

func TestEncodeIsTheAnnotationFormat(t *testing.T) {
	k := mustKeyring(t, "key-1")
	annotation := encode(t, k, subject, request)
	var m map[string]any
	if err := json.Unmarshal([]byte(annotation), &m); err != nil {
		t.Fatalf("annotation %s is not JSON: %v", annotation, err)
	}
	want := map[string]any{
		"user":              "alice",
		"requestedAt":       "2026-11-26T10:30:00Z",
		"propagationPolicy": "Foreground",
		"uid":               string(subject.UID),
		"keyID":             "key-1",
		"signature":         k.Sign(subject, request).Signature,
	}
	if len(m) != len(want) {
		t.Errorf("annotation has fields %v, want %v", m, want)
	}
	for f, v := range want {
		if m[f] != v {
			t.Errorf("annotation field %q = %v, want %v", f, m[f], v)
		}
	}
}

func TestVerifyMalformed(t *testing.T) {
	k := mustKeyring(t, "key-1")
	valid := encode(t, k, subject, request)
	without := func(field string) string {
		return edit(t, valid, func(m map[string]any) { delete(m, field) })
	}
	for _, tc := range []struct {
		name       string
		annotation string
	}{
		{"empty", ""},
		{"not JSON", "not json"},
		{"truncated JSON", valid[:len(valid)-1]},
		{"JSON string", `"alice"`},
		{"JSON array", `[]`},
		{"JSON null", `null`},
		{"empty object", `{}`},
		{"unsigned old format", `{"user":"alice","requestedAt":"2026-11-26T10:30:00Z"}`},
		{"unsigned old format with policy", `{"user":"alice","requestedAt":"2026-11-26T10:30:00Z","propagationPolicy":"Orphan"}`},
		{"without signature", without("signature")},
		{"without keyID", without("keyID")},
		{"without uid", without("uid")},
		{"without user", without("user")},
		{"without requestedAt", without("requestedAt")},
		{"empty signature", edit(t, valid, func(m map[string]any) { m["signature"] = "" })},
		{"null requestedAt", edit(t, valid, func(m map[string]any) { m["requestedAt"] = nil })},
		{"requestedAt not a time", edit(t, valid, func(m map[string]any) { m["requestedAt"] = "yesterday" })},
		{"user not a string", edit(t, valid, func(m map[string]any) { m["user"] = 42 })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := k.Verify(subject, tc.annotation, requestedAt, 0)
			wantProblem(t, err, ProblemMalformed)
		})
	}
}

func TestVerifyUnknownKey(t *testing.T) {
	signer := mustKeyring(t, "key-1")
	annotation := encode(t, signer, subject, request)
	for _, tc := range []struct {
		name       string
		verifier   *Keyring
		annotation string
		want       Problem
	}{
		{"same key", mustKeyring(t, "key-1"), annotation, ""},
		{"only another key", mustKeyring(t, "key-2"), annotation, ProblemUnknownKey},
		{"other keys", mustKeyring(t, "key-0", "key-2"), annotation, ProblemUnknownKey},
		{"keyID edited to an unknown key", signer, edit(t, annotation, func(m map[string]any) { m["keyID"] = "key-9" }), ProblemUnknownKey},
		// Same ID, another secret: the key is known, the signature does not
		// match.
		{"same ID, other secret", func() *Keyring {
			k, err := NewKeyring([]Key{{ID: "key-1", Secret: secret('x')}})
			if err != nil {
				t.Fatal(err)
			}
			return k
		}(), annotation, ProblemBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.verifier.Verify(subject, tc.annotation, requestedAt, 0)
			wantProblem(t, err, tc.want)
		})
	}
}

func TestVerifyBadSignature(t *testing.T) {
	k := mustKeyring(t, "key-a", "key-b") // key-b signs
	valid := encode(t, k, subject, request)
	set := func(field string, v any) string {
		return edit(t, valid, func(m map[string]any) { m[field] = v })
	}
	sig := k.Sign(subject, request).Signature
	raw, _ := base64.StdEncoding.DecodeString(sig)
	flipped := bytes.Clone(raw)
	flipped[0] ^= 1
	lastFlipped := bytes.Clone(raw)
	lastFlipped[len(lastFlipped)-1] ^= 0x80
	for _, tc := range []struct {
		name       string
		annotation string
	}{
		{"user edited", set("user", "mallory")},
		{"user with other case", set("user", "Alice")},
		{"requestedAt a second later", set("requestedAt", "2026-11-26T10:30:01Z")},
		{"requestedAt a day later", set("requestedAt", "2026-11-27T10:30:00Z")},
		{"propagationPolicy changed", set("propagationPolicy", "Orphan")},
		{"propagationPolicy removed", edit(t, valid, func(m map[string]any) { delete(m, "propagationPolicy") })},
		{"uid edited", set("uid", "22222222-2222-2222-2222-222222222222")},
		{"signature bit flipped", set("signature", base64.StdEncoding.EncodeToString(flipped))},
		{"signature last byte flipped", set("signature", base64.StdEncoding.EncodeToString(lastFlipped))},
		{"signature truncated", set("signature", base64.StdEncoding.EncodeToString(raw[:16]))},
		{"signature not base64", set("signature", "!!!not-base64!!!")},
		{"signature of another request", set("signature", k.Sign(subject, depv1alpha1.DeletionRequest{User: "bob", RequestedAt: request.RequestedAt}).Signature)},
		{"keyID swapped to another valid key", set("keyID", "key-a")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.annotation == valid {
				t.Fatal("the edit did not change the annotation")
			}
			_, err := k.Verify(subject, tc.annotation, requestedAt, 0)
			wantProblem(t, err, ProblemBadSignature)
		})
	}

	t.Run("propagationPolicy added", func(t *testing.T) {
		withoutPolicy := request
		withoutPolicy.PropagationPolicy = nil
		a := edit(t, encode(t, k, subject, withoutPolicy), func(m map[string]any) { m["propagationPolicy"] = "Orphan" })
		_, err := k.Verify(subject, a, requestedAt, 0)
		wantProblem(t, err, ProblemBadSignature)
	})
	// The MAC covers the key ID: even two keys with the same secret do not
	// sign alike.
	t.Run("keyID swapped to a key with the same secret", func(t *testing.T) {
		same, err := NewKeyring([]Key{{ID: "key-1", Secret: secret('s')}, {ID: "key-2", Secret: secret('s')}})
		if err != nil {
			t.Fatal(err)
		}
		a := edit(t, encode(t, same, subject, request), func(m map[string]any) { m["keyID"] = "key-1" })
		_, err = same.Verify(subject, a, requestedAt, 0)
		wantProblem(t, err, ProblemBadSignature)
	})
	t.Run("signature from an unrelated key of the same length", func(t *testing.T) {
		other, err := NewKeyring([]Key{{ID: "key-b", Secret: secret('z')}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = k.Verify(subject, encode(t, other, subject, request), requestedAt, 0)
		wantProblem(t, err, ProblemBadSignature)
	})
}

// TestVerifySignatureEncodingIsCanonical checks that a record verifies only
// with the signature exactly as the webhook wrote it: base64 decoding is
// lenient (line breaks, the unused low bits of the last character), so
// another encoding of the same MAC is an edited record.
func TestVerifySignatureEncodingIsCanonical(t *testing.T) {
	k := mustKeyring(t, "key-1")
	valid := encode(t, k, subject, request)
	sig := k.Sign(subject, request).Signature
	if len(sig) != 44 || !strings.HasSuffix(sig, "=") || strings.HasSuffix(sig, "==") {
		t.Fatalf("signature %q is not 44 characters with one '='", sig)
	}
	// The last character before '=' carries 4 bits of the MAC and 2 unused
	// bits: flip the lowest.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	last := strings.IndexByte(alphabet, sig[42])
	paddingBits := sig[:42] + string(alphabet[last^1]) + "="
	for _, tc := range []struct {
		name      string
		signature string
	}{
		{"non-zero padding bits", paddingBits},
		{"newline inside", sig[:20] + "\n" + sig[20:]},
		{"CRLF at the end", sig + "\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := edit(t, valid, func(m map[string]any) { m["signature"] = tc.signature })
			if a == valid {
				t.Fatal("the edit did not change the annotation")
			}
			got, err := k.Verify(subject, a, requestedAt, 0)
			if err == nil {
				t.Fatalf("Verify accepted the signature %q (returning %q), which is not the %q the keyring wrote", tc.signature, got.Signature, sig)
			}
			wantProblem(t, err, ProblemBadSignature)
		})
	}
}

func TestVerifyWrongObject(t *testing.T) {
	k := mustKeyring(t, "key-1")
	annotation := encode(t, k, subject, request)
	with := func(fn func(s *Subject)) Subject {
		s := subject
		fn(&s)
		return s
	}
	for _, tc := range []struct {
		name    string
		subject Subject
		want    Problem
	}{
		{"same object", subject, ""},
		// A recreated object of the same name: the MAC verifies for the
		// UID in the record, which is not the object's.
		{"another UID", with(func(s *Subject) { s.UID = "22222222-2222-2222-2222-222222222222" }), ProblemWrongObject},
		{"empty UID", with(func(s *Subject) { s.UID = "" }), ProblemWrongObject},
		// The MAC covers the rest of the subject: a record copied to
		// another object does not verify at all.
		{"another name", with(func(s *Subject) { s.Name = "vpc-2" }), ProblemBadSignature},
		{"another namespace", with(func(s *Subject) { s.Namespace = "other" }), ProblemBadSignature},
		{"cluster-scoped", with(func(s *Subject) { s.Namespace = "" }), ProblemBadSignature},
		{"another cluster", with(func(s *Subject) { s.Cluster = "root:org:other" }), ProblemBadSignature},
		{"another resource", with(func(s *Subject) { s.Resource.Resource = "subnets" }), ProblemBadSignature},
		{"another group", with(func(s *Subject) { s.Resource.Group = "other.example.com" }), ProblemBadSignature},
		{"core group", with(func(s *Subject) { s.Resource.Group = "" }), ProblemBadSignature},
		// Length prefixes: moving a character from one field to the next
		// changes the MAC.
		{"boundary between namespace and name moved", with(func(s *Subject) { s.Namespace, s.Name = "defaultv", "pc-1" }), ProblemBadSignature},
		{"boundary between group and resource moved", with(func(s *Subject) {
			s.Resource = schema.GroupResource{Group: "networking.example.comv", Resource: "pcs"}
		}), ProblemBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := k.Verify(tc.subject, annotation, requestedAt, 0)
			wantProblem(t, err, tc.want)
		})
	}

	// Fields are length-prefixed: moving a separator-like character from
	// one field into the next changes the MAC.
	t.Run("colon moved between fields", func(t *testing.T) {
		for _, tc := range []struct {
			name         string
			signed, used Subject
		}{
			{"namespace and name", with(func(s *Subject) { s.Namespace, s.Name = "a:b", "c" }), with(func(s *Subject) { s.Namespace, s.Name = "a", "b:c" })},
			{"cluster and group", with(func(s *Subject) { s.Cluster, s.Resource.Group = "root:org", "example.com" }), with(func(s *Subject) { s.Cluster, s.Resource.Group = "root", "org:example.com" })},
			{"name and UID", with(func(s *Subject) { s.Name, s.UID = "n:1", "u" }), with(func(s *Subject) { s.Name, s.UID = "n", "1:u" })},
		} {
			t.Run(tc.name, func(t *testing.T) {
				a := encode(t, k, tc.signed, request)
				if _, err := k.Verify(tc.signed, a, requestedAt, 0); err != nil {
					t.Fatalf("Verify for the signed subject: %v", err)
				}
				if tc.used.UID != tc.signed.UID {
					a = edit(t, a, func(m map[string]any) { m["uid"] = string(tc.used.UID) })
				}
				_, err := k.Verify(tc.used, a, requestedAt, 0)
				wantProblem(t, err, ProblemBadSignature)
			})
		}
	})
	t.Run("colon moved between user and UID in the record", func(t *testing.T) {
		r := request
		r.User = "x:alice"
		a := edit(t, encode(t, k, with(func(s *Subject) { s.UID = "u" }), r), func(m map[string]any) {
			m["uid"], m["user"] = "u:x", "alice"
		})
		_, err := k.Verify(with(func(s *Subject) { s.UID = "u:x" }), a, requestedAt, 0)
		wantProblem(t, err, ProblemBadSignature)
	})

	t.Run("record moved to a recreated object with its UID edited", func(t *testing.T) {
		recreated := with(func(s *Subject) { s.UID = "33333333-3333-3333-3333-333333333333" })
		moved := edit(t, annotation, func(m map[string]any) { m["uid"] = string(recreated.UID) })
		_, err := k.Verify(recreated, moved, requestedAt, 0)
		wantProblem(t, err, ProblemBadSignature)
	})
}

func TestVerifyExpiry(t *testing.T) {
	k := mustKeyring(t, "key-1")
	annotation := encode(t, k, subject, request)
	for _, tc := range []struct {
		name string
		now  time.Time
		ttl  time.Duration
		want Problem
	}{
		{"at the request", requestedAt, time.Hour, ""},
		{"before the request (clock skew)", requestedAt.Add(-time.Hour), time.Hour, ""},
		{"just within the TTL", requestedAt.Add(time.Hour - time.Nanosecond), time.Hour, ""},
		{"exactly the TTL", requestedAt.Add(time.Hour), time.Hour, ""},
		{"a nanosecond past the TTL", requestedAt.Add(time.Hour + time.Nanosecond), time.Hour, ProblemExpired},
		{"a second past the TTL", requestedAt.Add(time.Hour + time.Second), time.Hour, ProblemExpired},
		{"a year later, TTL a day", requestedAt.AddDate(1, 0, 0), 24 * time.Hour, ProblemExpired},
		{"a year later, TTL 0 (no expiry)", requestedAt.AddDate(1, 0, 0), 0, ""},
		{"a year later, negative TTL (no expiry)", requestedAt.AddDate(1, 0, 0), -time.Second, ""},
		{"now in another zone, exactly the TTL", requestedAt.Add(time.Hour).In(time.FixedZone("UTC-8", -8*3600)), time.Hour, ""},
		{"now in another zone, past the TTL", requestedAt.Add(time.Hour + time.Second).In(time.FixedZone("UTC-8", -8*3600)), time.Hour, ProblemExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := k.Verify(subject, annotation, tc.now, tc.ttl)
			wantProblem(t, err, tc.want)
		})
	}

	// Expiry is judged only for a record that verifies: a forged old
	// record is a bad signature, not expired.
	t.Run("expired and edited", func(t *testing.T) {
		edited := edit(t, annotation, func(m map[string]any) { m["user"] = "mallory" })
		_, err := k.Verify(subject, edited, requestedAt.AddDate(1, 0, 0), time.Hour)
		wantProblem(t, err, ProblemBadSignature)
	})
	t.Run("expired and for another UID", func(t *testing.T) {
		other := subject
		other.UID = "other"
		_, err := k.Verify(other, annotation, requestedAt.AddDate(1, 0, 0), time.Hour)
		wantProblem(t, err, ProblemWrongObject)
	})
	t.Run("sub-second request, judged from the signed second", func(t *testing.T) {
		r := request
		r.RequestedAt = metav1.NewTime(requestedAt.Add(900 * time.Millisecond))
		a := encode(t, k, subject, r)
		_, err := k.Verify(subject, a, requestedAt.Add(time.Hour), time.Hour)
		wantProblem(t, err, "")
		_, err = k.Verify(subject, a, requestedAt.Add(time.Hour+time.Millisecond), time.Hour)
		wantProblem(t, err, ProblemExpired)
	})
}

func TestVerifyErrorDetail(t *testing.T) {
	k := mustKeyring(t, "key-1")
	_, err := k.Verify(subject, encode(t, k, subject, request), requestedAt.Add(2*time.Hour), time.Hour)
	wantProblem(t, err, ProblemExpired)
	msg := err.Error()
	for _, want := range []string{"expired", "alice", "2026-11-26T10:30:00Z", "1h0m0s"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
}

func TestProblemOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Problem
	}{
		{"nil", nil, ""},
		{"plain error", errors.New("boom"), ""},
		{"*Error", &Error{Problem: ProblemExpired, Detail: "old"}, ProblemExpired},
		{"wrapped *Error", fmt.Errorf("replaying: %w", &Error{Problem: ProblemWrongObject}), ProblemWrongObject},
		{"joined *Error", errors.Join(errors.New("other"), &Error{Problem: ProblemUnknownKey}), ProblemUnknownKey},
		{"Error value (not pointer)", fmt.Errorf("%v", Error{Problem: ProblemMalformed}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ProblemOf(tc.err); got != tc.want {
				t.Errorf("ProblemOf(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}

	// Every problem Verify can return is one of Problems, and Problems are
	// distinct.
	seen := map[Problem]bool{}
	for _, p := range Problems {
		if seen[p] {
			t.Errorf("problem %q listed twice", p)
		}
		seen[p] = true
	}
	for _, p := range []Problem{ProblemMalformed, ProblemUnknownKey, ProblemBadSignature, ProblemWrongObject, ProblemExpired} {
		if !seen[p] {
			t.Errorf("Problems lacks %q", p)
		}
	}
	e := &Error{Problem: ProblemBadSignature, Detail: "the detail"}
	if msg := e.Error(); !strings.Contains(msg, "bad-signature") || !strings.Contains(msg, "the detail") {
		t.Errorf("Error() = %q, want the problem and the detail", msg)
	}
}

func TestKeyRotation(t *testing.T) {
	old := mustKeyring(t, "a")
	rotated := mustKeyring(t, "a", "b")
	next := mustKeyring(t, "b")

	if got := rotated.SigningKeyID(); got != "b" {
		t.Fatalf("SigningKeyID of {a, b} = %q, want b", got)
	}
	if got := rotated.Sign(subject, request).KeyID; got != "b" {
		t.Fatalf("{a, b} signs with %q, want b", got)
	}

	signedByOld := encode(t, old, subject, request)
	signedByRotated := encode(t, rotated, subject, request)
	for _, tc := range []struct {
		name       string
		verifier   *Keyring
		annotation string
		want       Problem
	}{
		{"old record, old keyring", old, signedByOld, ""},
		{"old record, rotated keyring", rotated, signedByOld, ""},
		{"old record, key a retired", next, signedByOld, ProblemUnknownKey},
		{"new record, rotated keyring", rotated, signedByRotated, ""},
		{"new record, key a retired", next, signedByRotated, ""},
		{"new record, rolled back to the old keyring", old, signedByRotated, ProblemUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.verifier.Verify(subject, tc.annotation, requestedAt, time.Hour)
			wantProblem(t, err, tc.want)
		})
	}
}

func TestRequest(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 30, 15, 999_999_999, time.FixedZone("CET", 3600))
	wantTime := time.Date(2026, 11, 26, 9, 30, 15, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		raw        string
		wantPolicy *metav1.DeletionPropagation
		wantErr    bool
	}{
		{"no options", "", nil, false},
		{"empty options", `{}`, nil, false},
		{"null options", `null`, nil, false},
		{"DeleteOptions without policy", `{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1","gracePeriodSeconds":5}`, nil, false},
		{"Foreground", `{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1","propagationPolicy":"Foreground"}`, policy(metav1.DeletePropagationForeground), false},
		{"Background", `{"propagationPolicy":"Background"}`, policy(metav1.DeletePropagationBackground), false},
		{"Orphan", `{"propagationPolicy":"Orphan"}`, policy(metav1.DeletePropagationOrphan), false},
		{"empty policy ignored", `{"propagationPolicy":""}`, nil, false},
		{"null policy", `{"propagationPolicy":null}`, nil, false},
		{"invalid JSON", `{"propagationPolicy":`, nil, true},
		{"not an object", `"Foreground"`, nil, true},
		{"policy not a string", `{"propagationPolicy":1}`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var raw []byte
			if tc.raw != "" {
				raw = []byte(tc.raw)
			}
			got, err := Request("alice", now, raw)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Request succeeded with %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Request: %v", err)
			}
			if got.User != "alice" {
				t.Errorf("User %q, want alice", got.User)
			}
			if !got.RequestedAt.Time.Equal(wantTime) || got.RequestedAt.Nanosecond() != 0 {
				t.Errorf("RequestedAt %s, want %s", got.RequestedAt.Time, wantTime)
			}
			if got.RequestedAt.Location() != time.UTC {
				t.Errorf("RequestedAt in %s, want UTC", got.RequestedAt.Location())
			}
			switch {
			case tc.wantPolicy == nil && got.PropagationPolicy != nil:
				t.Errorf("PropagationPolicy %q, want none", *got.PropagationPolicy)
			case tc.wantPolicy != nil && (got.PropagationPolicy == nil || *got.PropagationPolicy != *tc.wantPolicy):
				t.Errorf("PropagationPolicy %v, want %q", got.PropagationPolicy, *tc.wantPolicy)
			}
			if got.UID != "" || got.KeyID != "" || got.Signature != "" {
				t.Errorf("Request returned a signed request: %+v", got)
			}
		})
	}

	t.Run("signs and verifies", func(t *testing.T) {
		k := mustKeyring(t, "key-1")
		req, err := Request("alice", now, []byte(`{"propagationPolicy":"Orphan"}`))
		if err != nil {
			t.Fatal(err)
		}
		got, err := k.Verify(subject, encode(t, k, subject, req), now, time.Minute)
		wantProblem(t, err, "")
		if got.PropagationPolicy == nil || *got.PropagationPolicy != metav1.DeletePropagationOrphan || !got.RequestedAt.Equal(&req.RequestedAt) {
			t.Errorf("Verify returned %+v, want %+v", got, req)
		}
	})
}
