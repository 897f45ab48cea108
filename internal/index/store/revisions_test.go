package store

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// revisionOf returns the dependent "vm" in c1 with uid at resourceVersion.
func revisionOf(t testing.TB, uid types.UID, resourceVersion string) *Object {
	t.Helper()
	o, err := Decode(fmt.Appendf(nil, `{"metadata":{"name":"vm","namespace":"default","uid":%q,"resourceVersion":%q,"annotations":{"kcp.io/cluster":"c1"}},"spec":{}}`,
		uid, resourceVersion), nil)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The store counts the id of a write admitted on a revision of a dependent
// (RevisionID) as seen once it sees the dependent change from that
// revision or go, and the id of a CREATE once it sees the dependent at
// all: in a watch event or a complete list.
func TestRevisions(t *testing.T) {
	const (
		u1 = types.UID("6f1c2a3b-0d4e-4f5a-8b6c-7d8e9f0a1b2c")
		u2 = types.UID("0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")
	)
	// step: the reflector hands the store the dependent "vm" with uid at
	// rv, with do "add", "update", "delete", or "list" (a complete list
	// of it; of nothing if uid is empty).
	type step struct {
		do  string
		uid types.UID
		rv  string
	}
	type id struct {
		uid types.UID
		rv  string
	}
	tests := []struct {
		name  string
		steps []step
		seen  []id
		// unseen are ids not seen.
		unseen []id
	}{
		{name: "created: the CREATE's id, not its revision's",
			steps: []step{{"add", u1, "10"}},
			seen:  []id{{u1, ""}}, unseen: []id{{u1, "10"}}},
		{name: "listed: the same",
			steps: []step{{"list", u1, "10"}},
			seen:  []id{{u1, ""}}, unseen: []id{{u1, "10"}}},
		{name: "updated: the revision it changed from",
			steps: []step{{"add", u1, "10"}, {"update", u1, "11"}},
			seen:  []id{{u1, ""}, {u1, "10"}}, unseen: []id{{u1, "11"}, {u1, "12"}}},
		{name: "the same revision again ends nothing",
			steps: []step{{"add", u1, "10"}, {"update", u1, "10"}, {"list", u1, "10"}},
			seen:  []id{{u1, ""}}, unseen: []id{{u1, "10"}}},
		{name: "deleted: its last revision",
			steps: []step{{"add", u1, "10"}, {"update", u1, "11"}, {"delete", u1, "12"}},
			seen:  []id{{u1, "10"}, {u1, "11"}}, unseen: []id{{u1, "12"}}},
		{name: "a revision the store never held is not seen",
			steps: []step{{"add", u1, "10"}, {"update", u1, "12"}},
			seen:  []id{{u1, "10"}}, unseen: []id{{u1, "11"}}},
		{name: "relisted at a later revision",
			steps: []step{{"add", u1, "10"}, {"list", u1, "15"}},
			seen:  []id{{u1, "10"}}, unseen: []id{{u1, "15"}}},
		{name: "gone from a relist",
			steps: []step{{"add", u1, "10"}, {"list", "", ""}},
			seen:  []id{{u1, "10"}}},
		{name: "replaced by another dependent of the name",
			steps: []step{{"add", u1, "10"}, {"update", u2, "20"}},
			seen:  []id{{u1, "10"}, {u2, ""}}, unseen: []id{{u2, "20"}}},
		{name: "replaced in a relist",
			steps: []step{{"add", u1, "10"}, {"list", u2, "20"}},
			seen:  []id{{u1, "10"}, {u2, ""}}, unseen: []id{{u2, "20"}}},
		{name: "another dependent's revision is its own",
			steps:  []step{{"add", u1, "10"}, {"update", u1, "11"}},
			unseen: []id{{u2, "10"}, {u2, ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(nil)
			r := s.ForShard("https://shard-1", func() {})
			for _, st := range tt.steps {
				var err error
				switch st.do {
				case "add":
					err = r.Add(revisionOf(t, st.uid, st.rv))
				case "update":
					err = r.Update(revisionOf(t, st.uid, st.rv))
				case "delete":
					err = r.Delete(revisionOf(t, st.uid, st.rv))
				case "list":
					var list []any
					if st.uid != "" {
						list = append(list, revisionOf(t, st.uid, st.rv))
					}
					err = r.Replace(list, "100")
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			for _, want := range tt.seen {
				if _, ok := s.Admitted(RevisionID(want.uid, want.rv)); !ok {
					t.Errorf("the id of %s at %q was not seen", want.uid, want.rv)
				}
			}
			for _, want := range tt.unseen {
				if _, ok := s.Admitted(RevisionID(want.uid, want.rv)); ok {
					t.Errorf("the id of %s at %q was seen", want.uid, want.rv)
				}
			}
		})
	}
}

// RevisionID gives 16 hex digits that tell apart the UID and revision,
// and the CREATE, of a dependent.
func TestRevisionID(t *testing.T) {
	ids := map[string]string{}
	for _, c := range []struct {
		uid types.UID
		rv  string
	}{{"a", ""}, {"a", "1"}, {"a", "10"}, {"a1", "0"}, {"a", "10 "}, {"b", "1"}} {
		got := RevisionID(c.uid, c.rv)
		if n, ok := parseAdmission(got); !ok || fmt.Sprintf("%016x", n) != got {
			t.Errorf("RevisionID(%q, %q) = %q, not an admission id", c.uid, c.rv, got)
		}
		if other, dup := ids[got]; dup {
			t.Errorf("RevisionID(%q, %q) = %q, as for %s", c.uid, c.rv, got, other)
		}
		ids[got] = fmt.Sprintf("%q/%q", c.uid, c.rv)
		if again := RevisionID(c.uid, c.rv); again != got {
			t.Errorf("RevisionID(%q, %q) changed: %q, %q", c.uid, c.rv, got, again)
		}
	}
}
