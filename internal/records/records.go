// Package records signs and verifies the records of deferred deletions
// (depv1alpha1.DeletionRequest, stored on the object whose deletion is
// deferred). A record is signed with HMAC-SHA256 under a key that only the
// webhook holds, and bound to the object it was written for: its logical
// cluster, resource, namespace, name and UID. So a record copied to another
// object, carried into a recreated object, edited, or written by anyone
// without the key fails verification, and the webhook never replays it.
// Records also expire: one older than the webhook's TTL is not replayed.
package records

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// Subject is the object a record is bound to.
type Subject struct {
	// Cluster is the logical cluster of the object (its workspace).
	Cluster logicalcluster.Name
	// Resource is the object's resource.
	Resource schema.GroupResource
	// Namespace is empty for a cluster-scoped object.
	Namespace string
	// Name is the object's name.
	Name string
	// UID is the object's UID.
	UID types.UID
}

// Problem is why a record fails verification.
type Problem string

// The problems a record can have; Verify returns an *Error with one.
const (
	// ProblemMalformed: the annotation is not a record (not JSON, or a
	// field missing), or the label is missing.
	ProblemMalformed Problem = "malformed"
	// ProblemUnknownKey: the record was signed with a key the webhook does
	// not hold (any more).
	ProblemUnknownKey Problem = "unknown-key"
	// ProblemBadSignature: the record was not signed by the webhook, or was
	// changed after it was.
	ProblemBadSignature Problem = "bad-signature"
	// ProblemWrongObject: the record was written for another object (or an
	// earlier object of the same name).
	ProblemWrongObject Problem = "wrong-object"
	// ProblemExpired: the record is older than the TTL.
	ProblemExpired Problem = "expired"
)

// Problems are all problems, for metrics.
var Problems = []Problem{ProblemMalformed, ProblemUnknownKey, ProblemBadSignature, ProblemWrongObject, ProblemExpired}

// Error is a record that failed verification.
type Error struct {
	Problem Problem
	Detail  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("deferred deletion record is %s: %s", e.Problem, e.Detail)
}

// ProblemOf returns the problem of an error returned by Verify, or "".
func ProblemOf(err error) Problem {
	var e *Error
	if errors.As(err, &e) {
		return e.Problem
	}
	return ""
}

func fail(p Problem, format string, args ...any) error {
	return &Error{Problem: p, Detail: fmt.Sprintf(format, args...)}
}

// Sign returns request, bound to s and signed with the keyring's signing
// key.
func (k *Keyring) Sign(s Subject, request depv1alpha1.DeletionRequest) depv1alpha1.DeletionRequest {
	request.UID = s.UID
	request.KeyID = k.signer.ID
	request.Signature = base64.StdEncoding.EncodeToString(mac(k.signer.Secret, s, request))
	return request
}

// Encode signs request for s and returns it as the value of the annotation.
func (k *Keyring) Encode(s Subject, request depv1alpha1.DeletionRequest) (string, error) {
	raw, err := json.Marshal(k.Sign(s, request))
	if err != nil {
		return "", fmt.Errorf("failed to encode the deletion request: %w", err)
	}
	return string(raw), nil
}

// Verify decodes the record in annotation (the value of the
// deletion-request annotation of the object s) and returns it if it was
// signed by a key of the keyring for exactly this object and, if ttl is
// positive, was requested no longer than ttl before now. Otherwise it
// returns an *Error saying why.
func (k *Keyring) Verify(s Subject, annotation string, now time.Time, ttl time.Duration) (depv1alpha1.DeletionRequest, error) {
	var request depv1alpha1.DeletionRequest
	if annotation == "" {
		return request, fail(ProblemMalformed, "no %s annotation", depv1alpha1.AnnotationDeletionRequest)
	}
	if err := json.Unmarshal([]byte(annotation), &request); err != nil {
		return request, fail(ProblemMalformed, "the %s annotation is not a deletion request: %v", depv1alpha1.AnnotationDeletionRequest, err)
	}
	if request.Signature == "" || request.KeyID == "" || request.UID == "" || request.User == "" || request.RequestedAt.IsZero() {
		return request, fail(ProblemMalformed, "the deletion request is not signed (written by an earlier release, or by hand)")
	}
	secret, ok := k.keys[request.KeyID]
	if !ok {
		return request, fail(ProblemUnknownKey, "signed with key %q, which the webhook does not hold", request.KeyID)
	}
	bound := s
	bound.UID = request.UID
	// Compared as the text the webhook writes: a lenient base64 decoder
	// would let an edited signature (a line break, unused low bits) pass.
	want := base64.StdEncoding.EncodeToString(mac(secret, bound, request))
	if !hmac.Equal([]byte(request.Signature), []byte(want)) {
		return request, fail(ProblemBadSignature, "the signature does not match the request and the object")
	}
	if request.UID != s.UID {
		return request, fail(ProblemWrongObject, "written for the object with UID %s, not %s", request.UID, s.UID)
	}
	if ttl > 0 && now.Sub(request.RequestedAt.Time) > ttl {
		return request, fail(ProblemExpired, "requested at %s by %s, more than %s ago", request.RequestedAt.UTC().Format(time.RFC3339), request.User, ttl)
	}
	return request, nil
}

// mac is the HMAC-SHA256 under secret of the request bound to s: every
// field length-prefixed, so that no two different inputs encode alike.
func mac(secret []byte, s Subject, request depv1alpha1.DeletionRequest) []byte {
	h := hmac.New(sha256.New, secret)
	policy := ""
	if request.PropagationPolicy != nil {
		policy = string(*request.PropagationPolicy)
	}
	for _, f := range []string{
		"dependencies.opendefense.cloud/deletion-request/v1", request.KeyID,
		s.Cluster.String(), s.Resource.Group, s.Resource.Resource, s.Namespace, s.Name, string(s.UID),
		request.User, request.RequestedAt.UTC().Format(time.RFC3339), policy,
	} {
		_, _ = io.WriteString(h, strconv.Itoa(len(f)))
		_, _ = io.WriteString(h, ":")
		_, _ = io.WriteString(h, f)
	}
	return h.Sum(nil)
}

// Request returns the deletion request of a DELETE by user, at now, with
// the options of the request (its raw DeleteOptions, which may be empty).
func Request(user string, now time.Time, rawOptions []byte) (depv1alpha1.DeletionRequest, error) {
	req := depv1alpha1.DeletionRequest{User: user, RequestedAt: metav1.NewTime(now.UTC().Truncate(time.Second))}
	if len(rawOptions) == 0 {
		return req, nil
	}
	var opts metav1.DeleteOptions
	if err := json.Unmarshal(rawOptions, &opts); err != nil {
		return req, fmt.Errorf("failed to decode the options of the request: %w", err)
	}
	if opts.PropagationPolicy != nil && *opts.PropagationPolicy != "" {
		req.PropagationPolicy = opts.PropagationPolicy
	}
	return req, nil
}
