package store

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// RevisionID returns the admission id of a write of the dependent with uid
// admitted on its revision resourceVersion, or, if resourceVersion is
// empty, of its CREATE: 16 hex digits, like the ids the webhook sets on
// dependents it labels (see depv1alpha1.LabelAdmission), derived from both.
//
// It names the writes whose admission cannot set the admission label: a
// write through the status subresource keeps the stored labels, and the
// check of new references, which records the references of such writes,
// validates and cannot mutate. kube-apiserver stores an UPDATE only over
// the revision it admitted it on (it admits again after a conflict), so
// the store counts the id as seen once it sees the dependent change from
// that revision, or be deleted: the write landed, or can no longer land.
// The id of a CREATE counts as seen once the store sees the dependent at
// all.
func RevisionID(uid types.UID, resourceVersion string) string {
	return fmt.Sprintf("%016x", revisionKey(string(uid), resourceVersion))
}

// revisionKey is the number RevisionID stands for (as parseAdmission reads
// it), from the first 8 bytes of a SHA-256 of the UID and the revision.
func revisionKey(uid, resourceVersion string) uint64 {
	var buf [128]byte
	b := append(buf[:0], "revision\x00"...)
	b = append(b, uid...)
	b = append(b, 0)
	b = append(b, resourceVersion...)
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[:8])
}

// revised returns keys with the ids of the revisions that the reflector of
// a shard ended when it replaced the entry before of a dependent with after
// (nil: none; see RevisionID): that of before, unless after is the same
// dependent at the same revision, and the id of after's CREATE if it is
// another dependent than before.
func revised(keys []uint64, before, after *entry) []uint64 {
	if before != nil && before.uid == (uid{}) {
		before = nil
	}
	if after != nil && after.uid == (uid{}) {
		after = nil
	}
	sameUID := before != nil && after != nil && before.uid == after.uid
	if before != nil && (!sameUID || before.revision != after.revision) {
		keys = append(keys, before.revision)
	}
	if after != nil && !sameUID {
		keys = append(keys, revisionKey(string(after.uid.String()), ""))
	}
	return keys
}
