package inflight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
)

// fakeObject is one protected object that Get and Patch serve: its
// resourceVersion, annotation and whether it is being deleted; a merge
// patch with a stale resourceVersion is a conflict, as on kcp.
type fakeObject struct {
	lock        sync.Mutex
	exists      bool
	rv          int
	ledger      string
	terminating bool
	// cleared is the value of the label that says the object is cleared
	// (api/v1alpha1.LabelCleared); empty: none.
	cleared    string
	patchDelay time.Duration
	patches    int
	gets       int
	// conflicts is how many patches are answered with a conflict (another
	// writer got there first) before one is applied; failures how many
	// fail outright.
	conflicts, failures int
}

func (o *fakeObject) json() []byte {
	meta := map[string]any{"name": "vpc-a", "namespace": "default", "resourceVersion": strconv.Itoa(o.rv),
		"annotations": map[string]string{"kcp.io/cluster": "c1", depv1alpha1.AnnotationAdmittedReferences: o.ledger}}
	if o.ledger == "" {
		delete(meta["annotations"].(map[string]string), depv1alpha1.AnnotationAdmittedReferences)
	}
	if o.terminating {
		meta["deletionTimestamp"] = "2026-11-27T00:00:00Z"
	}
	if o.cleared != "" {
		meta["labels"] = map[string]string{depv1alpha1.LabelCleared: o.cleared}
	}
	raw, _ := json.Marshal(map[string]any{"metadata": meta})
	return raw
}

var vpcs = schema.GroupResource{Group: "network.test.io", Resource: "vpcs"}

func (o *fakeObject) Get(context.Context, index.Source, logicalcluster.Name, string, string) ([]byte, error) {
	o.lock.Lock()
	defer o.lock.Unlock()
	o.gets++
	if !o.exists {
		return nil, apierrors.NewNotFound(vpcs, "vpc-a")
	}
	return o.json(), nil
}

func (o *fakeObject) Patch(_ context.Context, _ index.Source, _ logicalcluster.Name, _, _ string, pt types.PatchType, body []byte) ([]byte, error) {
	time.Sleep(o.patchDelay)
	o.lock.Lock()
	defer o.lock.Unlock()
	o.patches++
	if pt != types.MergePatchType {
		return nil, fmt.Errorf("unexpected patch type %s", pt)
	}
	if !o.exists {
		return nil, apierrors.NewNotFound(vpcs, "vpc-a")
	}
	var p struct {
		Metadata struct {
			ResourceVersion string             `json:"resourceVersion"`
			Labels          map[string]*string `json:"labels"`
			Annotations     map[string]string  `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	if o.failures > 0 {
		o.failures--
		return nil, apierrors.NewInternalError(errors.New("etcd timed out"))
	}
	if o.conflicts > 0 {
		o.conflicts--
		o.rv++ // someone else wrote it
		return nil, apierrors.NewConflict(vpcs, "vpc-a", fmt.Errorf("the object has been modified"))
	}
	if p.Metadata.ResourceVersion != strconv.Itoa(o.rv) {
		return nil, apierrors.NewConflict(vpcs, "vpc-a", fmt.Errorf("the object has been modified"))
	}
	o.ledger = p.Metadata.Annotations[depv1alpha1.AnnotationAdmittedReferences]
	if v, ok := p.Metadata.Labels[depv1alpha1.LabelCleared]; ok {
		o.cleared = ""
		if v != nil {
			o.cleared = *v
		}
	}
	o.rv++
	return o.json(), nil
}

func (o *fakeObject) stored(t *testing.T) Ledger {
	t.Helper()
	o.lock.Lock()
	defer o.lock.Unlock()
	l, err := Parse(o.ledger)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var target = Target{Source: index.Source{Resource: vpcs.WithVersion("v1")}, Cluster: "c1", Namespace: "default", Name: "vpc-a"}

func none(string) (time.Time, bool) { return time.Time{}, false }

func TestWriterBatchesConcurrentReferences(t *testing.T) {
	obj := &fakeObject{exists: true, rv: 10, patchDelay: 20 * time.Millisecond}
	w := NewWriter(obj, Options{})
	ids := NewIDs(nil)
	const n = 16
	var wg sync.WaitGroup
	written := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			written[i] = ids.New("vm", time.Now())
			res, err := w.Record(context.Background(), target, written[i], none)
			if err != nil || res.Missing || res.Object.ResourceVersion == "" {
				t.Errorf("Record = %+v, %v", res, err)
			}
		}()
	}
	wg.Wait()
	if obj.patches > 4 {
		t.Errorf("%d concurrent references took %d patches; want them batched", n, obj.patches)
	}
	if obj.gets != 1 {
		t.Errorf("read the object %d times; want once, then what the writes returned", obj.gets)
	}
	l := obj.stored(t)
	for _, id := range written {
		if !containsMark(l, id) {
			t.Errorf("mark %s missing from %s", id, l)
		}
	}
}

func containsMark(l Ledger, id string) bool {
	for _, m := range l.Marks {
		if m.ID == id {
			return true
		}
	}
	return false
}

func TestWriterKeepsOthersMarksAcrossConflicts(t *testing.T) {
	other := NewIDs(nil).New("other", time.Now())
	obj := &fakeObject{exists: true, rv: 3, conflicts: 2, ledger: Ledger{}.With(Mark{ID: other, At: time.Now()}).String()}
	conflicts := 0
	w := NewWriter(obj, Options{OnConflict: func() { conflicts++ }})
	mine := NewIDs(nil).New("vm", time.Now())
	if _, err := w.Record(context.Background(), target, mine, none); err != nil {
		t.Fatal(err)
	}
	if conflicts != 2 {
		t.Errorf("OnConflict called %d times, want 2", conflicts)
	}
	l := obj.stored(t)
	if !containsMark(l, mine) || !containsMark(l, other) {
		t.Errorf("stored %s; want both marks", l)
	}
}

// A refused admission's mark is withdrawn, others' stay; a mark no longer
// named costs no write, a missing target no error.
func TestWriterWithdraw(t *testing.T) {
	ids := NewIDs(nil)
	other := ids.New("other", time.Now())
	obj := &fakeObject{exists: true, rv: 3, ledger: Ledger{}.With(Mark{ID: other, At: time.Now()}).String()}
	w := NewWriter(obj, Options{})
	mine := ids.New("vm", time.Now())
	if _, err := w.Record(context.Background(), target, mine, none); err != nil {
		t.Fatal(err)
	}
	obj.conflicts = 1 // another replica wrote the object in between
	if err := w.Withdraw(context.Background(), target, mine, none); err != nil {
		t.Fatal(err)
	}
	if l := obj.stored(t); containsMark(l, mine) || !containsMark(l, other) {
		t.Errorf("stored %s; want the other mark alone", l)
	}
	patches := obj.patches
	if err := w.Withdraw(context.Background(), target, mine, none); err != nil {
		t.Fatal(err)
	}
	if obj.patches != patches {
		t.Errorf("withdrawing a mark not named patched the object")
	}
	if err := NewWriter(&fakeObject{}, Options{}).Withdraw(context.Background(), target, mine, none); err != nil {
		t.Errorf("withdrawing from a missing target: %v", err)
	}
}

func TestWriterMissingAndTerminating(t *testing.T) {
	w := NewWriter(&fakeObject{}, Options{})
	res, err := w.Record(context.Background(), target, NewIDs(nil).New("vm", time.Now()), none)
	if err != nil || !res.Missing {
		t.Errorf("a missing target: Record = %+v, %v; want Missing", res, err)
	}
	obj := &fakeObject{exists: true, terminating: true}
	res, err = NewWriter(obj, Options{}).Record(context.Background(), target, NewIDs(nil).New("vm", time.Now()), none)
	if err != nil || !res.Object.Terminating {
		t.Errorf("a terminating target: Record = %+v, %v; want the object, Terminating", res, err)
	}
}

// A reference recorded on a cleared object ends the clearance; one that
// cannot be recorded on an object that carries a clearance, or that could
// not be read, says so (ErrMayBeCleared), so that it is not admitted
// unrecorded.
func TestWriterClearance(t *testing.T) {
	cleared := Ledger{Clearance: Clearance("ab", "u1")}.String()
	obj := &fakeObject{exists: true, ledger: cleared, cleared: "ab"}
	if _, err := NewWriter(obj, Options{}).Record(context.Background(), target, NewIDs(nil).New("vm", time.Now()), none); err != nil {
		t.Fatal(err)
	}
	if l := obj.stored(t); l.Clearance != "" || len(l.Marks) != 1 {
		t.Errorf("stored %s; want the mark and no clearance", l)
	}
	if obj.cleared != "" {
		t.Errorf("the label %s is %q after a reference was recorded; want it removed", depv1alpha1.LabelCleared, obj.cleared)
	}

	forbidden := apierrors.NewForbidden(vpcs, "vpc-a", fmt.Errorf("no patch"))
	tests := []struct {
		name      string
		ledger    string
		getErr    error
		mayBe     bool
		forbidden bool
	}{
		{"cleared, patch forbidden", cleared, nil, true, true},
		{"not cleared, patch forbidden", Ledger{}.String(), nil, false, true},
		{"read forbidden", cleared, forbidden, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := &forbiddenObject{fakeObject: fakeObject{exists: true, ledger: tt.ledger}, getErr: tt.getErr, patchErr: forbidden}
			_, err := NewWriter(obj, Options{}).Record(context.Background(), target, NewIDs(nil).New("vm", time.Now()), none)
			if errors.Is(err, ErrMayBeCleared) != tt.mayBe || apierrors.IsForbidden(err) != tt.forbidden {
				t.Errorf("Record = %v; want ErrMayBeCleared %v, Forbidden %v", err, tt.mayBe, tt.forbidden)
			}
		})
	}
}

// forbiddenObject refuses reads (if getErr) and patches with an error.
type forbiddenObject struct {
	fakeObject
	getErr, patchErr error
}

func (o *forbiddenObject) Get(ctx context.Context, src index.Source, c logicalcluster.Name, ns, name string) ([]byte, error) {
	if o.getErr != nil {
		return nil, o.getErr
	}
	return o.fakeObject.Get(ctx, src, c, ns, name)
}

func (o *forbiddenObject) Patch(context.Context, index.Source, logicalcluster.Name, string, string, types.PatchType, []byte) ([]byte, error) {
	return nil, o.patchErr
}

func TestWriterFoldsLandedMarks(t *testing.T) {
	landedID := NewIDs(nil).New("old", time.Now())
	seenAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	obj := &fakeObject{exists: true, ledger: Ledger{}.With(Mark{ID: landedID, At: seenAt.Add(-time.Millisecond)}).String()}
	mine := NewIDs(nil).New("vm", time.Now())
	_, err := NewWriter(obj, Options{}).Record(context.Background(), target, mine, func(id string) (time.Time, bool) {
		return seenAt, id == landedID
	})
	if err != nil {
		t.Fatal(err)
	}
	l := obj.stored(t)
	if containsMark(l, landedID) || !containsMark(l, mine) || !l.Landed.Equal(seenAt) {
		t.Errorf("stored %s; want the landed mark folded into l=%d and mine kept", l, seenAt.UnixMilli())
	}
}

func TestWriterReplacesAMalformedLedgerWithAFloor(t *testing.T) {
	obj := &fakeObject{exists: true, ledger: "garbage"}
	before := time.Now().Truncate(time.Millisecond)
	if _, err := NewWriter(obj, Options{}).Record(context.Background(), target, NewIDs(nil).New("vm", time.Now()), none); err != nil {
		t.Fatal(err)
	}
	if l := obj.stored(t); l.Floor.Before(before) || len(l.Marks) != 1 {
		t.Errorf("stored %s; want a floor of now and the new mark", l)
	}
}

func TestWriterGivesUpWithTheCaller(t *testing.T) {
	obj := &fakeObject{exists: true, patchDelay: 200 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := NewWriter(obj, Options{}).Record(ctx, target, NewIDs(nil).New("vm", time.Now()), none); err == nil {
		t.Fatal("Record returned no error after its context ended")
	}
}

// A target primed with a listed state is written without a read first; a
// state that is stale by then costs a conflict and a read, never a mark;
// the writer's own knowledge of a target wins over a listed state.
func TestWriterPrime(t *testing.T) {
	other := NewIDs(nil).New("other", time.Now())
	tests := []struct {
		name string
		// listed is the state primed, the object as a LIST returned it (nil:
		// not primed).
		listed   []byte
		obj      *fakeObject
		wantGets int
		// wantOther: a mark another writer stored is kept.
		wantOther bool
	}{
		{name: "not primed: read, then written", obj: &fakeObject{exists: true, rv: 7}, wantGets: 1},
		{name: "primed with the current state: written without a read",
			listed: (&fakeObject{exists: true, rv: 7}).json(), obj: &fakeObject{exists: true, rv: 7}, wantGets: 0},
		{name: "primed with a stale state: a conflict, a read, and the other writer's mark is kept",
			listed: (&fakeObject{exists: true, rv: 5}).json(), obj: &fakeObject{exists: true, rv: 7, ledger: Ledger{}.With(Mark{ID: other, At: time.Now()}).String()},
			wantGets: 1, wantOther: true},
		{name: "primed with a malformed object: ignored, read", listed: []byte(`{"metadata":`), obj: &fakeObject{exists: true, rv: 7}, wantGets: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWriter(tt.obj, Options{})
			if tt.listed != nil {
				w.Prime(target, tt.listed)
			}
			mine := NewIDs(nil).New("vm", time.Now())
			res, err := w.Record(context.Background(), target, mine, none)
			if err != nil || res.Missing {
				t.Fatalf("Record = %+v, %v", res, err)
			}
			if tt.obj.gets != tt.wantGets {
				t.Errorf("read the object %d times, want %d", tt.obj.gets, tt.wantGets)
			}
			l := tt.obj.stored(t)
			if !containsMark(l, mine) || tt.wantOther && !containsMark(l, other) {
				t.Errorf("stored %s; want my mark (and the other's: %v)", l, tt.wantOther)
			}
		})
	}

	// What the writer learned from its own write wins over a listed state.
	obj := &fakeObject{exists: true, rv: 7}
	w := NewWriter(obj, Options{})
	if _, err := w.Record(context.Background(), target, NewIDs(nil).New("vm", time.Now()), none); err != nil {
		t.Fatal(err)
	}
	w.Prime(target, (&fakeObject{exists: true, rv: 7}).json()) // older than the write's
	if _, err := w.Record(context.Background(), target, NewIDs(nil).New("vm", time.Now()), none); err != nil {
		t.Fatal(err)
	}
	if obj.gets != 1 || obj.patches != 2 {
		t.Errorf("%d reads and %d writes; want the second write to start from the first's outcome, without a conflict", obj.gets, obj.patches)
	}
}

// The write of a ledger removes the label that says the object is cleared
// where the object carries it, and leaves the labels alone otherwise (a
// merge patch of a null label would leave an empty map of labels behind).
func TestPatchBodyLabel(t *testing.T) {
	for _, uncleared := range []bool{true, false} {
		body, err := patchBody("7", Ledger{}, uncleared)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Metadata map[string]json.RawMessage `json:"metadata"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		labels, ok := p.Metadata["labels"]
		want := `{"` + depv1alpha1.LabelCleared + `":null}`
		if uncleared && string(labels) != want || !uncleared && ok {
			t.Errorf("patchBody(uncleared=%v) = %s; want labels %s", uncleared, body, map[bool]string{true: want, false: "absent"}[uncleared])
		}
	}
}
