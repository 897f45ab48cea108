package tracking

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// ProbeValuePrefix starts the throwaway value that a probe of the
// labelling webhook (a scheme label) or of the guard (a ledger, a cleared
// label) writes: the webhook signs its answer to a dry run of its own user
// that writes such a value (see Answers).
const ProbeValuePrefix = "probe-"

// answerLength is the number of hex digits of a signed answer.
const answerLength = 32

// Answers signs the webhook's answers to its own probes, and verifies
// them, with a secret that the webhook's replicas share (derived from the
// record keys): the answer to a probe, which any replica may serve, is an
// HMAC of the probe's kind, its throwaway value and, for the labelling
// webhook, the scheme it vouches for. So another admission webhook that
// imitates the product's (one that a provider put in place of the
// product's configuration, say) cannot show a probe a webhook in effect
// that is not: an answer it makes up does not verify, and the probe counts
// as one that found the webhook gone. Without a secret (no record keys),
// answers are not signed and every answer counts, as the answers of
// admission itself.
//
// A nil *Answers signs nothing and takes every answer.
type Answers struct {
	// secrets returns the secrets to sign with (the first) and to verify
	// with (any); none for unsigned answers.
	secrets func() [][]byte
}

// NewAnswers returns Answers keyed by what secrets returns when called:
// the first secret signs, every one verifies (so that answers keep
// verifying while keys rotate), none means unsigned answers.
func NewAnswers(secrets func() [][]byte) *Answers {
	return &Answers{secrets: secrets}
}

// Sign returns the answer to a probe of kind that wrote value, for scheme
// (empty but for KindLabelling), or "" if answers are not signed.
func (a *Answers) Sign(kind Kind, value, scheme string) string {
	keys := a.keys()
	if len(keys) == 0 {
		return ""
	}
	return signAnswer(keys[0], kind, value, scheme)
}

// Valid reports whether got is the answer to a probe of kind that wrote
// value, for scheme: signed with one of the secrets, or anything if
// answers are not signed.
func (a *Answers) Valid(kind Kind, value, scheme, got string) bool {
	keys := a.keys()
	if len(keys) == 0 {
		return true
	}
	for _, k := range keys {
		if hmac.Equal([]byte(got), []byte(signAnswer(k, kind, value, scheme))) {
			return true
		}
	}
	return false
}

func (a *Answers) keys() [][]byte {
	if a == nil || a.secrets == nil {
		return nil
	}
	return a.secrets()
}

// signAnswer is the HMAC of a probe's kind, value and scheme under key, in hex.
func signAnswer(key []byte, kind Kind, value, scheme string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(strings.Join([]string{"probe answer", string(kind), value, scheme}, "\x00")))
	return hex.EncodeToString(h.Sum(nil))[:answerLength]
}

// IsProbeValue reports whether value is the throwaway value of a probe.
func IsProbeValue(value string) bool {
	return strings.HasPrefix(value, ProbeValuePrefix)
}
