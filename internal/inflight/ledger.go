package inflight

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// MaxInFlight bounds how long a write can be in flight after its admission
// began: kcp serves every request within its request timeout of 60 s, which
// it does not let an operator change (it refuses --request-timeout), and a
// write that etcd accepted at the deadline commits within moments. The
// margin of 5 s also covers the clock skew between webhook replicas, whose
// clocks stamp and judge marks, and kcp's, which stamps creationTimestamp.
const MaxInFlight = 65 * time.Second

// DefaultMaxMarks is how many marks a Ledger keeps by name; older ones are
// folded into its floors (see Ledger.Compact). 64 marks take about 2 KB of
// the object's annotations.
const DefaultMaxMarks = 64

// version starts every encoded Ledger, so that a later format can be told
// apart.
const version = "v1"

// Mark is one reference admitted to the object: the id of the admission
// (also set on the dependent, see api/v1alpha1.LabelAdmission) and when
// the webhook admitted it, to the millisecond.
type Mark struct {
	ID string
	At time.Time
}

// Ledger is what the webhook keeps on a protected object about the
// references to it that it admitted: the recent ones by admission id, and
// two floors for those it no longer names.
//
// A reference named by a Mark has landed once an index has seen a
// dependent carrying its id; until then, and until At+MaxInFlight, it may
// be in flight. A reference folded into Floor may be in flight until
// Floor+MaxInFlight; one folded into Landed had landed by Landed, so an
// index that is current past Landed holds it.
type Ledger struct {
	// Floor is when the latest reference that is neither named nor known
	// to have landed was admitted; zero if none.
	Floor time.Time
	// Landed is when the latest reference known to have landed, and no
	// longer named, had been seen by an index; zero if none.
	Landed time.Time
	// Marks are the named references, oldest first.
	Marks []Mark
	// Leases are the webhook replicas that may admit references to the
	// object without writing a mark each, until their lease ends (see
	// Lease). A lease counts as a floor at its end until its replica
	// replaces it with the marks it admitted under it.
	Leases []Lease
	// Clearance, if set, says that the webhook found the object
	// unreferenced, with nothing in flight, under the rules whose
	// fingerprint it names (see Clearance); the same write labels the
	// object cleared (api/v1alpha1.LabelCleared), which the DELETE
	// webhook's object selector leaves out, so kcp deletes the object
	// without calling the webhook. Any write that records a reference
	// drops both (see With).
	Clearance string
}

// Lease says that the webhook replica named Replica admits references to
// the object until Until without a write each: it keeps their marks and
// writes them, in place of the lease, once the lease ends (or sooner, when
// a DELETE of the object asks it to). The write that stores a lease is a
// write of the object like any mark's, so a DELETE admitted on a state
// without it is admitted again; one admitted on a state with it waits for
// the marks (see Ledger.Assess). Only a replica that admits references to
// the object in a stream takes one (see Options.Lease).
type Lease struct {
	Replica string
	Until   time.Time
}

// leasePrefix starts a lease's field in the encoded ledger.
const leasePrefix = "r="

// Clearance returns the value of Ledger.Clearance that says that the
// object with uid was found unreferenced under the rules of fingerprint
// (see reflabels.ClearanceFingerprint): bound to the object's UID, so that
// it says nothing about another object of the name.
func Clearance(fingerprint string, uid types.UID) string {
	return fingerprint + "/" + string(uid)
}

// clearancePrefix starts the field of Ledger.Clearance, the last of the
// encoded ledger.
const clearancePrefix = "c="

// ClearanceSuffix returns how an encoded ledger that carries the
// clearance of fingerprint for the object with uid ends, as the match
// condition of the DELETE webhook tests it.
func ClearanceSuffix(fingerprint string, uid types.UID) string {
	return " " + clearancePrefix + Clearance(fingerprint, uid)
}

// ms is a time to the millisecond, as a Ledger keeps it.
func ms(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMilli(t.UnixMilli())
}

// String encodes the ledger for the object's annotation, e.g.
// "v1 f=1764212000000 l=0 3f09c1aa8e2b7d10@1764212001234", with a lease
// "r=9a0c4e1f2b3d5a67~1764212002234" after the marks, and the clearance
// last.
func (l Ledger) String() string {
	var b strings.Builder
	b.WriteString(version)
	b.WriteString(" f=")
	b.WriteString(strconv.FormatInt(unixMilli(l.Floor), 10))
	b.WriteString(" l=")
	b.WriteString(strconv.FormatInt(unixMilli(l.Landed), 10))
	for _, m := range l.Marks {
		b.WriteByte(' ')
		b.WriteString(m.ID)
		b.WriteByte('@')
		b.WriteString(strconv.FormatInt(m.At.UnixMilli(), 10))
	}
	for _, r := range l.Leases {
		b.WriteByte(' ')
		b.WriteString(leasePrefix)
		b.WriteString(r.Replica)
		b.WriteByte('~')
		b.WriteString(strconv.FormatInt(r.Until.UnixMilli(), 10))
	}
	if l.Clearance != "" {
		b.WriteByte(' ')
		b.WriteString(clearancePrefix)
		b.WriteString(l.Clearance)
	}
	return b.String()
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMilli(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// ErrMalformed is returned (wrapped) by Parse for a value that is not a
// Ledger.
var ErrMalformed = errors.New("malformed admitted-references annotation")

// maxEncoded bounds the value Parse reads: a ledger of DefaultMaxMarks is
// about 2 KB, and only the webhook writes the annotation.
const maxEncoded = 64 << 10

// Parse decodes an annotation value; the empty string is the empty Ledger.
// Marks are returned oldest first.
func Parse(s string) (Ledger, error) {
	if s == "" {
		return Ledger{}, nil
	}
	if len(s) > maxEncoded {
		return Ledger{}, fmt.Errorf("%w: %d bytes", ErrMalformed, len(s))
	}
	fields := strings.Fields(s)
	if len(fields) < 3 || fields[0] != version {
		return Ledger{}, fmt.Errorf("%w: %q", ErrMalformed, truncate(s))
	}
	floor, ok := field(fields[1], "f=")
	landed, ok2 := field(fields[2], "l=")
	if !ok || !ok2 {
		return Ledger{}, fmt.Errorf("%w: %q", ErrMalformed, truncate(s))
	}
	l := Ledger{Floor: fromMilli(floor), Landed: fromMilli(landed)}
	marks := fields[3:]
	if n := len(marks); n > 0 && strings.HasPrefix(marks[n-1], clearancePrefix) {
		l.Clearance = strings.TrimPrefix(marks[n-1], clearancePrefix)
		if !validClearance(l.Clearance) {
			return Ledger{}, fmt.Errorf("%w: clearance %q", ErrMalformed, truncate(l.Clearance))
		}
		marks = marks[:n-1]
	}
	for _, f := range marks {
		if lease, ok := strings.CutPrefix(f, leasePrefix); ok {
			replica, until, found := strings.Cut(lease, "~")
			v, err := strconv.ParseInt(until, 10, 64)
			if !found || !ValidID(replica) || err != nil || v <= 0 || slices.ContainsFunc(l.Leases, func(o Lease) bool { return o.Replica == replica }) {
				return Ledger{}, fmt.Errorf("%w: lease %q", ErrMalformed, truncate(f))
			}
			l.Leases = append(l.Leases, Lease{Replica: replica, Until: time.UnixMilli(v)})
			continue
		}
		id, at, found := strings.Cut(f, "@")
		v, err := strconv.ParseInt(at, 10, 64)
		if !found || !ValidID(id) || err != nil || v <= 0 {
			return Ledger{}, fmt.Errorf("%w: mark %q", ErrMalformed, truncate(f))
		}
		l.Marks = append(l.Marks, Mark{ID: id, At: time.UnixMilli(v)})
	}
	slices.SortStableFunc(l.Marks, func(a, b Mark) int { return a.At.Compare(b.At) })
	return l, nil
}

// validClearance reports whether a clearance is a fingerprint and a UID
// (see Clearance).
func validClearance(c string) bool {
	fingerprint, uid, ok := strings.Cut(c, "/")
	return ok && fingerprint != "" && uid != "" && !strings.Contains(uid, "/")
}

func field(s, prefix string) (int64, bool) {
	v, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n >= 0
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Landed tells when an index first saw a dependent carrying an admission
// id, and whether it did.
type Landed func(id string) (time.Time, bool)

// With returns the ledger with marks added (a mark whose id it names
// already keeps the later time), without its clearance: a reference
// recorded on the object ends it.
func (l Ledger) With(marks ...Mark) Ledger {
	out := Ledger{Floor: l.Floor, Landed: l.Landed, Marks: slices.Clone(l.Marks), Leases: l.Leases}
	for _, m := range marks {
		m.At = ms(m.At)
		if i := slices.IndexFunc(out.Marks, func(o Mark) bool { return o.ID == m.ID }); i >= 0 {
			if m.At.After(out.Marks[i].At) {
				out.Marks[i].At = m.At
			}
			continue
		}
		out.Marks = append(out.Marks, m)
	}
	slices.SortStableFunc(out.Marks, func(a, b Mark) int { return a.At.Compare(b.At) })
	return out
}

// Without returns the ledger without the marks named by ids: references
// whose admission was refused, which can never land. A reference already
// folded into Floor stays there.
func (l Ledger) Without(ids ...string) Ledger {
	out := l
	out.Marks = slices.DeleteFunc(slices.Clone(l.Marks), func(m Mark) bool { return slices.Contains(ids, m.ID) })
	return out
}

// WithLease returns the ledger with the lease of replica ending at until,
// in place of any lease of replica it has.
func (l Ledger) WithLease(replica string, until time.Time) Ledger {
	out := l.WithoutLease(replica)
	out.Leases = append(out.Leases, Lease{Replica: replica, Until: ms(until)})
	return out
}

// WithoutLease returns the ledger without the lease of replica.
func (l Ledger) WithoutLease(replica string) Ledger {
	out := l
	out.Leases = slices.DeleteFunc(slices.Clone(l.Leases), func(r Lease) bool { return r.Replica == replica })
	return out
}

// Lease returns the lease of replica, if the ledger has one.
func (l Ledger) Lease(replica string) (Lease, bool) {
	i := slices.IndexFunc(l.Leases, func(r Lease) bool { return r.Replica == replica })
	if i < 0 {
		return Lease{}, false
	}
	return l.Leases[i], true
}

// EffectiveFloor is the floor with every lease counted as one at its end:
// the replica of a lease may have admitted references under it until then
// that the ledger does not name.
func (l Ledger) EffectiveFloor() time.Time {
	floor := l.Floor
	for _, r := range l.Leases {
		floor = Later(floor, r.Until)
	}
	return floor
}

// names reports whether the ledger names a mark of one of ids.
func (l Ledger) names(ids []string) bool {
	return slices.ContainsFunc(l.Marks, func(m Mark) bool { return slices.Contains(ids, m.ID) })
}

// Compact folds marks the ledger need not name any more: one that landed
// into Landed (at the time it was seen), one older than MaxInFlight into
// Floor (it can no longer be in flight: it landed by then, or never will),
// and, while more than maxMarks remain, the oldest into Floor; and a lease
// that has ended into Floor at its end (its replica replaces it with its
// marks as it ends; one that has not yet, or never will, covers them so).
// Folding loses nothing a decision needs, only the ability to tell a named
// reference landed: Floor keeps what was folded in flight until
// Floor+MaxInFlight.
func (l Ledger) Compact(now time.Time, landed Landed, maxMarks int) Ledger {
	out := Ledger{Floor: l.Floor, Landed: l.Landed, Clearance: l.Clearance}
	for _, r := range l.Leases {
		if now.Before(r.Until) {
			out.Leases = append(out.Leases, r)
			continue
		}
		out.Floor = Later(out.Floor, r.Until)
	}
	for _, m := range l.Marks {
		if at, ok := landed(m.ID); ok {
			out.Landed = Later(out.Landed, ms(at))
			continue
		}
		if !now.Before(m.At.Add(MaxInFlight)) {
			out.Floor = Later(out.Floor, m.At)
			continue
		}
		out.Marks = append(out.Marks, m)
	}
	if maxMarks < 0 {
		maxMarks = 0
	}
	for len(out.Marks) > maxMarks {
		out.Floor = Later(out.Floor, out.Marks[0].At)
		out.Marks = out.Marks[1:]
	}
	return out
}

// Later returns the later of a and b.
func Later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Assessment is what a ledger says about a DELETE of its object at some
// moment.
type Assessment struct {
	// Horizon is the time past which an index must be current to hold every
	// dependent whose reference the ledger covers and that has landed (see
	// Assess).
	Horizon time.Time
	// Recorded is the horizon of what the ledger records: Horizon without
	// the object's creation. A dependent that the index lacks once it is
	// current past Recorded, and that references the object, was admitted
	// while the object did not exist (it left no mark) and was stored after
	// the object's last write, if the index has also passed the object's
	// revision (see horizon.Judge.Current).
	Recorded time.Time
	// InFlight are the named references that have not landed and may still
	// be in flight, oldest first.
	InFlight []Mark
	// FloorInFlight is set while references folded into Floor, or admitted
	// under a lease, may still be in flight: until Floor+MaxInFlight.
	FloorInFlight bool
	// Floor is the ledger's floor with its leases counted at their ends
	// (see Ledger.EffectiveFloor).
	Floor time.Time
	// Leases are the ledger's leases: references admitted under them are
	// named once their replicas end them (see Writer.Settle).
	Leases []Lease
}

// Retry returns when every reference the assessment found in flight will
// have landed or failed.
func (a Assessment) Retry() time.Time {
	var t time.Time
	if a.FloorInFlight {
		t = a.Floor.Add(MaxInFlight)
	}
	for _, m := range a.InFlight {
		t = Later(t, m.At.Add(MaxInFlight))
	}
	return t
}

// Assess judges a DELETE at now of an object with this ledger, created at
// created (its creationTimestamp, to the second), against an index that
// tells which admission ids landed. The horizon is the latest of
//
//   - created plus a second plus MaxInFlight: a dependent admitted while
//     the object did not exist yet left no mark, and was stored by then;
//   - Floor (or the end of a lease, if later) plus MaxInFlight, and
//     Landed;
//   - for each named reference that has not landed and is older than
//     MaxInFlight, its time plus MaxInFlight.
//
// Named references that landed need nothing more: the index that saw them
// holds their dependents (or has seen them change since). Those younger
// than MaxInFlight that have not landed are in flight, and so is Floor
// while it is younger than MaxInFlight. Recorded is the horizon without
// its first term.
func (l Ledger) Assess(now, created time.Time, landed Landed) Assessment {
	a := Assessment{Floor: l.EffectiveFloor(), Leases: l.Leases}
	if !a.Floor.IsZero() {
		a.Recorded = a.Floor.Add(MaxInFlight)
		a.FloorInFlight = now.Before(a.Floor.Add(MaxInFlight))
	}
	a.Recorded = Later(a.Recorded, l.Landed)
	for _, m := range l.Marks {
		if _, ok := landed(m.ID); ok {
			continue
		}
		if now.Before(m.At.Add(MaxInFlight)) {
			a.InFlight = append(a.InFlight, m)
			continue
		}
		a.Recorded = Later(a.Recorded, m.At.Add(MaxInFlight))
	}
	a.Horizon = a.Recorded
	if !created.IsZero() {
		a.Horizon = Later(a.Horizon, created.Add(time.Second+MaxInFlight))
	}
	return a
}
