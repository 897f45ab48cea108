package webhookserver

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"testing"

	"github.com/opendefensecloud/dependency-controller/internal/records"
	"github.com/opendefensecloud/dependency-controller/internal/replay"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
)

func TestSharedSecrets(t *testing.T) {
	key := func(id string, b byte) records.Key {
		return records.Key{ID: id, Secret: bytes.Repeat([]byte{b}, records.MinKeyLength)}
	}
	ring, err := records.NewKeyring([]records.Key{key("key-1", 1), key("key-2", 2)})
	if err != nil {
		t.Fatal(err)
	}
	recs := &replay.Records{Keys: records.StaticKeys(ring)}
	// hmacOf is the derivation, written out here so that a change of
	// derive shows.
	hmacOf := func(secret []byte, purpose string) []byte {
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(purpose))
		return mac.Sum(nil)
	}

	// The replicas of the release before derived the key of admission ids
	// from the signing key alone: a rolling upgrade keeps recognising them.
	ids := admissionIDKey(recs)()
	if want := hmacOf(ring.SigningSecret(), "admission ids"); !bytes.Equal(ids, want) {
		t.Errorf("the key of admission ids is not derived from the signing key")
	}
	if admissionIDKey(nil)() != nil {
		t.Error("a key of admission ids without record keys")
	}
	shared := sharedSecrets(recs, "probe answers")()
	if len(shared) != 2 || !bytes.Equal(shared[0], hmacOf(ring.SigningSecret(), "probe answers")) || !bytes.Equal(shared[1], hmacOf(key("key-1", 1).Secret, "probe answers")) {
		t.Errorf("the secrets of probe answers are not derived from the keys, the signing key's first")
	}
	if bytes.Equal(shared[0], ids) {
		t.Error("two purposes share a secret")
	}
	if got := sharedSecrets(nil, "probe answers")(); got != nil {
		t.Errorf("without record keys: %d secrets, want none", len(got))
	}

	// An answer signed with the key before the newest still verifies (the
	// replicas read a rotated key within seconds of each other).
	older, err := records.NewKeyring([]records.Key{key("key-1", 1)})
	if err != nil {
		t.Fatal(err)
	}
	signed := answers(&replay.Records{Keys: records.StaticKeys(older)}).Sign(tracking.KindGuard, "probe-a", "")
	if !answers(recs).Valid(tracking.KindGuard, "probe-a", "", signed) {
		t.Error("an answer signed with key-1 does not verify with key-1 and key-2")
	}
	if answers(nil).Sign(tracking.KindGuard, "probe-a", "") != "" {
		t.Error("answers are signed without record keys")
	}
}
