package inflight

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/opendefensecloud/dependency-controller/internal/index/store"
)

// An admission id is 16 hex digits: the time the webhook made it (16 bits
// of Unix seconds, which wrap every 18 hours), 16 random bits, and 32 bits
// of an HMAC-SHA256 of both and of the identity of the dependent it was
// made for, under a key of the webhook; two dependents get the same id
// only if all three agree. The webhook can therefore tell an id it made moments ago
// for the same dependent (kcp calls a mutating webhook again within the
// same request when a later webhook changed the object) from one a user
// copied from another object, or an old one carried by exported YAML.
const (
	idTimeBytes   = 2
	idRandomBytes = 2
	idMACBytes    = 4
	idBytes       = idTimeBytes + idRandomBytes + idMACBytes
	// IDLength is the length of an admission id.
	IDLength = 2 * idBytes
)

// IDs makes and verifies admission ids.
type IDs struct {
	key func() []byte
}

// NewIDs returns IDs that sign with the key that key returns when called;
// a key shared by the webhook's replicas lets each recognize the ids of the
// others. With a nil key func (or one that returns no key), a random key of
// this process signs.
func NewIDs(key func() []byte) *IDs {
	own := make([]byte, 32)
	_, _ = rand.Read(own) // never fails (crypto/rand)
	return &IDs{key: func() []byte {
		if key != nil {
			if k := key(); len(k) > 0 {
				return k
			}
		}
		return own
	}}
}

// New returns a new admission id for the dependent named by identity.
func (s *IDs) New(identity string, now time.Time) string {
	var b [idBytes]byte
	binary.BigEndian.PutUint16(b[:idTimeBytes], uint16(now.Unix()))
	_, _ = rand.Read(b[idTimeBytes : idTimeBytes+idRandomBytes])
	copy(b[idTimeBytes+idRandomBytes:], s.mac(b[:idTimeBytes+idRandomBytes], identity))
	return hex.EncodeToString(b[:])
}

// Recent reports whether id is one that New made for identity no longer
// than within before now (and not more than a second after it); within is
// at most a few hours, the times in ids wrap.
func (s *IDs) Recent(id, identity string, now time.Time, within time.Duration) bool {
	if !ValidID(id) {
		return false
	}
	b, _ := hex.DecodeString(id)
	if !hmac.Equal(b[idTimeBytes+idRandomBytes:], s.mac(b[:idTimeBytes+idRandomBytes], identity)) {
		return false
	}
	age := time.Duration(uint16(now.Unix())-binary.BigEndian.Uint16(b[:idTimeBytes])) * time.Second
	return age <= within || age >= (1<<16-1)*time.Second
}

func (s *IDs) mac(data []byte, identity string) []byte {
	h := hmac.New(sha256.New, s.key())
	h.Write(data)
	h.Write([]byte{0})
	h.Write([]byte(identity))
	return h.Sum(nil)[:idMACBytes]
}

// ValidID reports whether s has the form of an admission id: IDLength
// lower-case hex digits.
func ValidID(s string) bool {
	if len(s) != IDLength {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// RevisionID returns the admission id of a write of the dependent with uid
// admitted on its revision resourceVersion, or of its CREATE if
// resourceVersion is empty: the id under which the webhook records the
// references of a write that cannot carry the admission label (a write
// through the status subresource, or of a type whose dependents are not
// labelled). An index counts it as landed once it has seen the dependent
// change from that revision, or go (see store.RevisionID).
func RevisionID(uid types.UID, resourceVersion string) string {
	return store.RevisionID(uid, resourceVersion)
}
