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
	derive := func(secret []byte, purpose string) []byte {
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(purpose))
		return mac.Sum(nil)
	}

	ids := sharedSecrets(recs, "admission ids")()
	// The replicas of the release before derived the key of admission ids
	// from the signing key alone: a rolling upgrade keeps recognising them.
	if len(ids) != 2 || !bytes.Equal(ids[0], derive(ring.SigningSecret(), "admission ids")) || !bytes.Equal(ids[1], derive(key("key-1", 1).Secret, "admission ids")) {
		t.Errorf("the secrets of admission ids are not derived from the keys, the signing key's first")
	}
	if answers := sharedSecrets(recs, "probe answers")(); bytes.Equal(answers[0], ids[0]) {
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
