package inflight

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// An admission id is 32 hex digits: the time the webhook made it (48 bits
// of Unix milliseconds), 32 random bits, and 48 bits of an HMAC-SHA256 of
// both and of the identity of the dependent it was made for, under a key
// of the webhook. The webhook can therefore tell an id it made moments ago
// for the same dependent (kcp calls a mutating webhook again within the
// same request when a later webhook changed the object) from one a user
// copied from another object, or an old one carried by exported YAML.
const (
	idTimeBytes   = 6
	idRandomBytes = 4
	idMACBytes    = 6
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
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], uint64(now.UnixMilli()))
	copy(b[:idTimeBytes], t[8-idTimeBytes:])
	_, _ = rand.Read(b[idTimeBytes : idTimeBytes+idRandomBytes])
	copy(b[idTimeBytes+idRandomBytes:], s.mac(b[:idTimeBytes+idRandomBytes], identity))
	return hex.EncodeToString(b[:])
}

// Recent reports whether id is one that New made for identity no longer
// than within before now (and not after it).
func (s *IDs) Recent(id, identity string, now time.Time, within time.Duration) bool {
	if !ValidID(id) {
		return false
	}
	b, _ := hex.DecodeString(id)
	if !hmac.Equal(b[idTimeBytes+idRandomBytes:], s.mac(b[:idTimeBytes+idRandomBytes], identity)) {
		return false
	}
	var t [8]byte
	copy(t[8-idTimeBytes:], b[:idTimeBytes])
	made := time.UnixMilli(int64(binary.BigEndian.Uint64(t[:])))
	age := now.Sub(made)
	return age >= -time.Second && age <= within
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
