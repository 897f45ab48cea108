package inflight

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.UnixMilli(1_764_212_000_000)

func id(n byte) string {
	return strings.Repeat(string("0123456789abcdef"[n%16]), IDLength)
}

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestParseRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		ledger Ledger
		want   string
	}{
		{"empty", Ledger{}, "v1 f=0 l=0"},
		{"floors", Ledger{Floor: at(0), Landed: at(time.Second)}, "v1 f=1764212000000 l=1764212001000"},
		{"marks", Ledger{Marks: []Mark{{id(1), at(0)}, {id(2), at(5 * time.Millisecond)}}},
			"v1 f=0 l=0 " + id(1) + "@1764212000000 " + id(2) + "@1764212000005"},
		{"cleared", Ledger{Landed: at(0), Clearance: Clearance("0f1e2d3c4b5a6978", "6c3d2a6e-1f0b-4c1e-9a51-0c3b9a8f0d11")},
			"v1 f=0 l=1764212000000 c=0f1e2d3c4b5a6978/6c3d2a6e-1f0b-4c1e-9a51-0c3b9a8f0d11"},
		{"marks and cleared", Ledger{Marks: []Mark{{id(1), at(0)}}, Clearance: Clearance("ab", "u1")},
			"v1 f=0 l=0 " + id(1) + "@1764212000000 c=ab/u1"},
		{"leases", Ledger{Marks: []Mark{{id(1), at(0)}}, Leases: []Lease{{id(7), at(time.Second)}, {id(8), at(2 * time.Second)}}},
			"v1 f=0 l=0 " + id(1) + "@1764212000000 r=" + id(7) + "~1764212001000 r=" + id(8) + "~1764212002000"},
		{"a lease and cleared", Ledger{Leases: []Lease{{id(7), at(time.Second)}}, Clearance: Clearance("ab", "u1")},
			"v1 f=0 l=0 r=" + id(7) + "~1764212001000 c=ab/u1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.ledger.String()
			if got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
			back, err := Parse(got)
			if err != nil {
				t.Fatal(err)
			}
			if back.String() != got {
				t.Fatalf("Parse(String()) = %q, want %q", back.String(), got)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{
		"v2 f=0 l=0", "v1", "v1 f=0", "v1 l=0 f=0", "v1 f=-1 l=0", "v1 f=x l=0",
		"v1 f=0 l=0 nothex@1", "v1 f=0 l=0 " + id(1), "v1 f=0 l=0 " + id(1) + "@0",
		"v1 f=0 l=0 " + id(1) + "@x", "v1 f=0 l=0 " + strings.ToUpper(id(10)) + "@1",
		strings.Repeat("v", maxEncoded+1),
		// A clearance is the last field, a fingerprint and a UID.
		"v1 f=0 l=0 c=", "v1 f=0 l=0 c=ab", "v1 f=0 l=0 c=/u1", "v1 f=0 l=0 c=ab/", "v1 f=0 l=0 c=ab/u/1",
		"v1 f=0 l=0 c=ab/u1 " + id(1) + "@1",
		// A lease names a replica (an id's form) and when it ends, once.
		"v1 f=0 l=0 r=", "v1 f=0 l=0 r=" + id(7), "v1 f=0 l=0 r=" + id(7) + "~0", "v1 f=0 l=0 r=" + id(7) + "~x",
		"v1 f=0 l=0 r=nothex~1", "v1 f=0 l=0 r=" + id(7) + "~1 r=" + id(7) + "~2",
	} {
		if _, err := Parse(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %v, want ErrMalformed", truncate(s), err)
		}
	}
	if l, err := Parse(""); err != nil || l.String() != (Ledger{}).String() {
		t.Errorf("Parse(\"\") = %v, %v", l, err)
	}
}

func TestParseSortsMarks(t *testing.T) {
	l, err := Parse("v1 f=0 l=0 " + id(2) + "@1764212000009 " + id(1) + "@1764212000001")
	if err != nil {
		t.Fatal(err)
	}
	if l.Marks[0].ID != id(1) || l.Marks[1].ID != id(2) {
		t.Fatalf("marks not sorted: %v", l.Marks)
	}
}

func TestWith(t *testing.T) {
	l := Ledger{Marks: []Mark{{id(1), at(0)}}}
	got := l.With(Mark{id(2), at(time.Millisecond)}, Mark{id(1), at(2 * time.Millisecond)}, Mark{id(3), at(-time.Millisecond)})
	want := "v1 f=0 l=0 " + id(3) + "@1764211999999 " + id(2) + "@1764212000001 " + id(1) + "@1764212000002"
	if got.String() != want {
		t.Fatalf("With = %q, want %q", got.String(), want)
	}
	if len(l.Marks) != 1 {
		t.Fatal("With changed its receiver")
	}
	// A mark added again with an earlier time keeps the later one.
	if again := got.With(Mark{id(1), at(0)}); again.String() != want {
		t.Fatalf("With of an older mark = %q", again.String())
	}
}

func TestWithout(t *testing.T) {
	l := Ledger{Floor: at(-time.Minute), Landed: at(-2 * time.Minute), Marks: []Mark{{id(1), at(0)}, {id(2), at(time.Second)}, {id(3), at(2 * time.Second)}}}
	tests := []struct {
		name string
		ids  []string
		want string
	}{
		{name: "one named mark goes, the floors stay", ids: []string{id(2)},
			want: "v1 f=1764211940000 l=1764211880000 " + id(1) + "@1764212000000 " + id(3) + "@1764212002000"},
		{name: "several go", ids: []string{id(1), id(3)}, want: "v1 f=1764211940000 l=1764211880000 " + id(2) + "@1764212001000"},
		{name: "an id the ledger does not name changes nothing", ids: []string{id(9)}, want: l.String()},
		{name: "no ids change nothing", want: l.String()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := l.Without(tt.ids...); got.String() != tt.want {
				t.Errorf("Without = %q, want %q", got, tt.want)
			}
			if len(l.Marks) != 3 {
				t.Fatal("Without changed its receiver")
			}
		})
	}
}

// Recording a reference ends a clearance; folding marks keeps it.
func TestWithEndsTheClearance(t *testing.T) {
	l := Ledger{Landed: at(0), Clearance: Clearance("ab", "u1")}
	if got := l.With(Mark{id(1), at(time.Second)}); got.Clearance != "" {
		t.Fatalf("With kept the clearance: %s", got)
	}
	if got := l.Compact(at(time.Minute), landedAt(nil), DefaultMaxMarks); got.Clearance != l.Clearance {
		t.Fatalf("Compact dropped the clearance: %s", got)
	}
	if !strings.HasSuffix(l.String(), ClearanceSuffix("ab", "u1")) {
		t.Fatalf("%q does not end with %q", l.String(), ClearanceSuffix("ab", "u1"))
	}
}

func landedAt(seen map[string]time.Time) Landed {
	return func(id string) (time.Time, bool) {
		t, ok := seen[id]
		return t, ok
	}
}

func TestCompact(t *testing.T) {
	marks := []Mark{{id(1), at(0)}, {id(2), at(10 * time.Second)}, {id(3), at(20 * time.Second)}, {id(4), at(30 * time.Second)}}
	tests := []struct {
		name   string
		ledger Ledger
		now    time.Time
		seen   map[string]time.Time
		max    int
		want   Ledger
	}{
		{
			name:   "nothing to fold",
			ledger: Ledger{Marks: marks},
			now:    at(31 * time.Second), max: 10,
			want: Ledger{Marks: marks},
		},
		{
			name:   "landed marks fold into Landed at the time they were seen",
			ledger: Ledger{Landed: at(time.Second), Marks: marks},
			now:    at(31 * time.Second), max: 10,
			seen: map[string]time.Time{id(2): at(11 * time.Second), id(4): at(31 * time.Second)},
			want: Ledger{Landed: at(31 * time.Second), Marks: []Mark{marks[0], marks[2]}},
		},
		{
			name:   "marks older than MaxInFlight fold into Floor",
			ledger: Ledger{Floor: at(-time.Hour), Marks: marks},
			now:    at(MaxInFlight + 15*time.Second), max: 10,
			want: Ledger{Floor: at(10 * time.Second), Marks: marks[2:]},
		},
		{
			name:   "beyond max, the oldest fold into Floor",
			ledger: Ledger{Marks: marks},
			now:    at(31 * time.Second), max: 1,
			want: Ledger{Floor: at(20 * time.Second), Marks: marks[3:]},
		},
		{
			name:   "a floor never goes back",
			ledger: Ledger{Floor: at(time.Hour), Landed: at(time.Hour), Marks: marks},
			now:    at(2 * time.Hour), max: 10,
			seen: map[string]time.Time{id(1): at(time.Second)},
			want: Ledger{Floor: at(time.Hour), Landed: at(time.Hour)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.ledger.Compact(tt.now, landedAt(tt.seen), tt.max)
			if got.String() != tt.want.String() {
				t.Fatalf("Compact = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAssess(t *testing.T) {
	created := at(-time.Hour)
	tests := []struct {
		name          string
		ledger        Ledger
		created       time.Time
		now           time.Time
		seen          map[string]time.Time
		wantHorizon   time.Time
		wantRecorded  time.Time
		wantInFlight  []string
		wantFloorBusy bool
	}{
		{
			name: "never referenced: the creation plus a second and MaxInFlight", created: created, now: at(0),
			wantHorizon: created.Add(time.Second + MaxInFlight),
		},
		{
			name: "a recent unlanded mark is in flight", created: created, now: at(time.Second),
			ledger:       Ledger{Marks: []Mark{{id(1), at(0)}}},
			wantHorizon:  created.Add(time.Second + MaxInFlight),
			wantInFlight: []string{id(1)},
		},
		{
			name: "a landed mark is settled", created: created, now: at(time.Second),
			ledger:      Ledger{Marks: []Mark{{id(1), at(0)}}},
			seen:        map[string]time.Time{id(1): at(10 * time.Millisecond)},
			wantHorizon: created.Add(time.Second + MaxInFlight),
		},
		{
			name: "an old unlanded mark moves the horizon", created: created, now: at(2 * MaxInFlight),
			ledger:       Ledger{Marks: []Mark{{id(1), at(0)}}},
			wantHorizon:  at(MaxInFlight),
			wantRecorded: at(MaxInFlight),
		},
		{
			name: "floors", created: created, now: at(MaxInFlight + time.Second),
			ledger:       Ledger{Floor: at(0), Landed: at(3 * MaxInFlight)},
			wantHorizon:  at(3 * MaxInFlight),
			wantRecorded: at(3 * MaxInFlight),
		},
		{
			name: "a recent floor may be in flight", created: created, now: at(time.Second),
			ledger:        Ledger{Floor: at(0)},
			wantHorizon:   at(MaxInFlight),
			wantRecorded:  at(MaxInFlight),
			wantFloorBusy: true,
		},
		{
			name: "a young object: the creation is the horizon, not what the ledger records", created: at(-time.Second), now: at(0),
			ledger:       Ledger{Marks: []Mark{{id(1), at(-2 * MaxInFlight)}}, Landed: at(-3 * MaxInFlight)},
			wantHorizon:  at(MaxInFlight),
			wantRecorded: at(-MaxInFlight),
		},
		{
			name: "no creation time", now: at(0),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.ledger.Assess(tt.now, tt.created, landedAt(tt.seen))
			if !a.Horizon.Equal(tt.wantHorizon) {
				t.Errorf("Horizon = %v, want %v", a.Horizon, tt.wantHorizon)
			}
			if !a.Recorded.Equal(tt.wantRecorded) {
				t.Errorf("Recorded = %v, want %v", a.Recorded, tt.wantRecorded)
			}
			var ids []string
			for _, m := range a.InFlight {
				ids = append(ids, m.ID)
			}
			if strings.Join(ids, ",") != strings.Join(tt.wantInFlight, ",") {
				t.Errorf("InFlight = %v, want %v", ids, tt.wantInFlight)
			}
			if a.FloorInFlight != tt.wantFloorBusy {
				t.Errorf("FloorInFlight = %v, want %v", a.FloorInFlight, tt.wantFloorBusy)
			}
		})
	}
}

func TestLeases(t *testing.T) {
	l := Ledger{Floor: at(0)}.WithLease(id(7), at(time.Second)).WithLease(id(8), at(3*time.Second))
	if got, ok := l.Lease(id(7)); !ok || !got.Until.Equal(at(time.Second)) {
		t.Errorf("Lease(7) = %v, %v", got, ok)
	}
	if got := l.WithLease(id(7), at(2*time.Second)).Leases; len(got) != 2 {
		t.Errorf("a replica's second lease replaces its first: %v", got)
	}
	if got := l.EffectiveFloor(); !got.Equal(at(3 * time.Second)) {
		t.Errorf("EffectiveFloor = %v, want the latest lease's end", got)
	}
	if got := l.WithoutLease(id(8)); len(got.Leases) != 1 || got.Leases[0].Replica != id(7) || len(l.Leases) != 2 {
		t.Errorf("WithoutLease(8) = %v (ledger now %v)", got.Leases, l.Leases)
	}
	if got := l.With(Mark{id(1), at(0)}).Without(id(1)); len(got.Leases) != 2 {
		t.Errorf("With and Without keep the leases: %v", got.Leases)
	}
	// Compact folds the leases that have ended into Floor, at their ends.
	c := l.Compact(at(2*time.Second), none, DefaultMaxMarks)
	if len(c.Leases) != 1 || c.Leases[0].Replica != id(8) || !c.Floor.Equal(at(time.Second)) {
		t.Errorf("Compact at 2s = %s, want the lease of 8 kept and that of 7 folded at 1s", c)
	}
	// A lease counts as a floor at its end, in flight until MaxInFlight
	// after it.
	a := l.Assess(at(4*time.Second), at(-time.Hour), none)
	if !a.FloorInFlight || !a.Floor.Equal(at(3*time.Second)) || !a.Recorded.Equal(at(3*time.Second+MaxInFlight)) || len(a.Leases) != 2 {
		t.Errorf("Assess = %+v", a)
	}
	if got := a.Retry(); !got.Equal(at(3*time.Second + MaxInFlight)) {
		t.Errorf("Retry = %v", got)
	}
}

func TestAssessmentRetry(t *testing.T) {
	a := Assessment{InFlight: []Mark{{id(1), at(0)}, {id(2), at(time.Second)}}}
	if got := a.Retry(); !got.Equal(at(time.Second + MaxInFlight)) {
		t.Errorf("Retry = %v", got)
	}
	a = Assessment{FloorInFlight: true, Floor: at(5 * time.Second)}
	if got := a.Retry(); !got.Equal(at(5*time.Second + MaxInFlight)) {
		t.Errorf("Retry with a floor = %v", got)
	}
}

func TestIDs(t *testing.T) {
	ids := NewIDs(nil)
	a := ids.New("c/ns/vm-1", t0)
	if !ValidID(a) {
		t.Fatalf("New made %q", a)
	}
	if b := ids.New("c/ns/vm-1", t0); b == a {
		t.Fatal("two ids are equal")
	}
	tests := []struct {
		name     string
		ids      *IDs
		id       string
		identity string
		now      time.Time
		want     bool
	}{
		{"its own, moments later", ids, a, "c/ns/vm-1", t0.Add(time.Second), true},
		{"for another dependent", ids, a, "c/ns/vm-2", t0.Add(time.Second), false},
		{"too old", ids, a, "c/ns/vm-1", t0.Add(31 * time.Second), false},
		{"from the future", ids, a, "c/ns/vm-1", t0.Add(-2 * time.Second), false},
		{"another key", NewIDs(nil), a, "c/ns/vm-1", t0.Add(time.Second), false},
		{"tampered", ids, "f" + a[1:], "c/ns/vm-1", t0.Add(time.Second), false},
		{"not an id", ids, "x", "c/ns/vm-1", t0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.ids.Recent(tt.id, tt.identity, tt.now, 30*time.Second); got != tt.want {
				t.Errorf("Recent = %v, want %v", got, tt.want)
			}
		})
	}
	shared := func() []byte { return []byte("a key shared by every replica, 32+ bytes") }
	if one, other := NewIDs(shared), NewIDs(shared); !other.Recent(one.New("x", t0), "x", t0, time.Second) {
		t.Error("replicas with a shared key do not recognize each other's ids")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("v1 f=0 l=0")
	f.Add("v1 f=1764212000000 l=1 " + id(1) + "@1764212000000")
	f.Add("v1 f=0 l=1764212000000 " + id(1) + "@1764212000000 c=0f1e2d3c4b5a6978/6c3d2a6e-1f0b-4c1e-9a51-0c3b9a8f0d11")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := Parse(s)
		if err != nil {
			return
		}
		back, err := Parse(l.String())
		if err != nil {
			t.Fatalf("Parse(%q).String() = %q does not parse: %v", s, l.String(), err)
		}
		if back.String() != l.String() {
			t.Fatalf("round trip of %q: %q != %q", s, back.String(), l.String())
		}
	})
}
