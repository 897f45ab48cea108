package inflight

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// patchesOf returns how often obj was patched.
func patchesOf(obj *fakeObject) int {
	obj.lock.Lock()
	defer obj.lock.Unlock()
	return obj.patches
}

// record records id on target and fails the test on an error.
func record(t *testing.T, w *Writer, id string) Result {
	t.Helper()
	res, err := w.Record(context.Background(), target, id, none)
	if err != nil {
		t.Fatalf("Record(%s): %v", id, err)
	}
	return res
}

// waitStored waits until the object's ledger satisfies ok.
func waitStored(t *testing.T, obj *fakeObject, ok func(Ledger) bool) Ledger {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l := obj.stored(t)
		if ok(l) {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("ledger %s never came to be as expected", l)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWriterLeasesAStream(t *testing.T) {
	obj := &fakeObject{exists: true, rv: 10}
	w := NewWriter(obj, Options{Lease: 300 * time.Millisecond})
	record(t, w, id(1))
	if l := obj.stored(t); len(l.Leases) != 0 {
		t.Fatalf("the first reference took a lease: %s", l)
	}
	leased := record(t, w, id(2))
	l := obj.stored(t)
	if _, ok := l.Lease(w.Replica()); !ok || !containsMark(l, id(2)) {
		t.Fatalf("the second reference within %s did not take a lease: %s", LeaseStreak, l)
	}
	before := patchesOf(obj)
	for i := byte(3); i < 13; i++ {
		if res := record(t, w, id(i)); res.Object.ResourceVersion != leased.Object.ResourceVersion || res.Missing {
			t.Errorf("under the lease, Record(%s) = %+v, want the object as the lease's write left it", id(i), res)
		}
	}
	if got := patchesOf(obj); got != before {
		t.Fatalf("10 references under the lease took %d writes, want none", got-before)
	}
	// As the lease ends, one write names them, and takes the next lease;
	// that ends with nothing admitted under it and is removed.
	l = waitStored(t, obj, func(l Ledger) bool { return len(l.Leases) == 0 && containsMark(l, id(12)) })
	for i := byte(1); i < 13; i++ {
		if !containsMark(l, id(i)) {
			t.Errorf("mark %s missing from %s", id(i), l)
		}
	}
	if got := patchesOf(obj) - before; got != 2 {
		t.Errorf("ending the leases took %d writes, want 2 (the marks with the next lease, then its end)", got)
	}
}

func TestWriterSettleEndsTheLeaseAtOnce(t *testing.T) {
	obj := &fakeObject{exists: true, rv: 10}
	w := NewWriter(obj, Options{Lease: time.Hour})
	record(t, w, id(1))
	record(t, w, id(2))
	record(t, w, id(3))
	if err := w.Withdraw(context.Background(), target, id(3), none); err != nil {
		t.Fatal(err)
	}
	before := patchesOf(obj)
	if err := w.Settle(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	l := obj.stored(t)
	if len(l.Leases) != 0 || !containsMark(l, id(2)) || containsMark(l, id(3)) {
		t.Fatalf("after Settle: %s, want no lease, the mark of 2 and not the withdrawn 3", l)
	}
	if got := patchesOf(obj) - before; got != 1 {
		t.Errorf("Settle took %d writes, want 1", got)
	}
	if err := w.Settle(context.Background(), target); err != nil || patchesOf(obj)-before != 1 {
		t.Errorf("Settle without a lease: %v, %d writes", err, patchesOf(obj)-before-1)
	}
}

// A write that was to name the references admitted under a lease fails:
// the lease stays on the object, and the writer's next write folds it into
// the floor rather than dropping it, since it no longer holds their marks.
func TestWriterFoldsALeaseWhoseMarksAWriteLost(t *testing.T) {
	obj := &fakeObject{exists: true, rv: 10}
	w := NewWriter(obj, Options{Lease: time.Hour})
	record(t, w, id(1))
	record(t, w, id(2))
	record(t, w, id(3))
	lease, _ := obj.stored(t).Lease(w.Replica())
	obj.lock.Lock()
	obj.failures = 1
	obj.lock.Unlock()
	if err := w.Settle(context.Background(), target); err == nil {
		t.Fatal("Settle succeeded, want the write's failure")
	}
	if _, ok := obj.stored(t).Lease(w.Replica()); !ok {
		t.Fatal("the failed write removed the lease")
	}
	record(t, w, id(4))
	l := obj.stored(t)
	if l.Floor.Before(lease.Until) || containsMark(l, id(3)) {
		t.Errorf("after the next write: %s; want the lost lease (until %d) folded into the floor", l, lease.Until.UnixMilli())
	}
}

// A reference recorded after a lease's end, before its timer ran, ends the
// lease with its own write, which names the marks admitted under it rather
// than folding the lease into the floor.
func TestWriterEndsALeaseWhoseEndPassedBeforeItsTimer(t *testing.T) {
	obj := &fakeObject{exists: true, rv: 10}
	w := NewWriter(obj, Options{Lease: time.Hour})
	record(t, w, id(1))
	record(t, w, id(2))
	record(t, w, id(3))
	lease, _ := obj.stored(t).Lease(w.Replica())
	w.lock.Lock()
	w.now = func() time.Time { return time.Now().Add(time.Hour + time.Second) }
	w.lock.Unlock()
	record(t, w, id(4))
	l := obj.stored(t)
	if !l.Floor.Before(lease.Until) {
		t.Errorf("after the next write: %s; want the lease (until %d) ended with its marks, not folded into the floor", l, lease.Until.UnixMilli())
	}
}

func TestWriterTakesNoLeaseWhenOff(t *testing.T) {
	obj := &fakeObject{exists: true, rv: 10}
	w := NewWriter(obj, Options{})
	for i := byte(1); i < 5; i++ {
		record(t, w, id(i))
	}
	if got := patchesOf(obj); got != 4 || len(obj.stored(t).Leases) != 0 {
		t.Errorf("without Lease: %d writes for 4 references, ledger %s", got, obj.stored(t))
	}
}

func TestWriterTakesNoLeaseOnAnObjectBeingDeleted(t *testing.T) {
	obj := &fakeObject{exists: true, rv: 10, terminating: true}
	w := NewWriter(obj, Options{Lease: time.Hour})
	for i := byte(1); i < 4; i++ {
		if res := record(t, w, id(i)); !res.Object.Terminating {
			t.Fatalf("Record(%s) = %+v, want the object being deleted", id(i), res)
		}
	}
	if got := patchesOf(obj); got != 3 {
		t.Errorf("%d writes for 3 references to an object being deleted, want one each", got)
	}
}

// TestWriterLosesNoReferenceOfAStream records references from many
// goroutines while leases end, by their time and by Settle, and checks
// that every one is named on the object in the end.
func TestWriterLosesNoReferenceOfAStream(t *testing.T) {
	obj := &fakeObject{exists: true, rv: 10, patchDelay: time.Millisecond}
	w := NewWriter(obj, Options{Lease: 20 * time.Millisecond, MaxMarks: 1000})
	ids := NewIDs(nil)
	var (
		wg      sync.WaitGroup
		lock    sync.Mutex
		written []string
	)
	for range 8 {
		wg.Go(func() {
			for range 40 {
				id := ids.New("vm", time.Now())
				if _, err := w.Record(context.Background(), target, id, none); err != nil {
					t.Error(err)
					return
				}
				lock.Lock()
				written = append(written, id)
				lock.Unlock()
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		for range 10 {
			if err := w.Settle(context.Background(), target); err != nil {
				t.Error(err)
			}
			time.Sleep(7 * time.Millisecond)
		}
	})
	wg.Wait()
	if err := w.Settle(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	l := waitStored(t, obj, func(l Ledger) bool { return len(l.Leases) == 0 })
	for _, id := range written {
		if !containsMark(l, id) {
			t.Errorf("mark %s of an admitted reference is missing from the ledger", id)
		}
	}
}

func TestResolve(t *testing.T) {
	other := NewReplica()
	t.Run("another replica's lease: read once it ended", func(t *testing.T) {
		end := time.Now().Add(100 * time.Millisecond)
		obj := &fakeObject{exists: true, rv: 10, ledger: Ledger{}.WithLease(other, end).String()}
		w := NewWriter(obj, Options{Lease: time.Second})
		go func() {
			// The other replica names its references as its lease ends.
			time.Sleep(time.Until(end) + 20*time.Millisecond)
			obj.lock.Lock()
			obj.ledger = Ledger{Marks: []Mark{{id(1), ms(end.Add(-time.Millisecond))}}}.String()
			obj.rv++
			obj.lock.Unlock()
		}()
		raw, err := w.Resolve(context.Background(), target, Ledger{}.WithLease(other, end).Leases)
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().Before(end) {
			t.Errorf("Resolve returned before the lease ended")
		}
		l, err := LedgerOf(raw)
		if err != nil || len(l.Leases) != 0 || !containsMark(l, id(1)) {
			t.Errorf("Resolve returned %s, %v; want the marks in place of the lease", l, err)
		}
	})
	t.Run("its own lease: ended at once", func(t *testing.T) {
		obj := &fakeObject{exists: true, rv: 10}
		w := NewWriter(obj, Options{Lease: time.Hour})
		record(t, w, id(1))
		record(t, w, id(2))
		record(t, w, id(3))
		start := time.Now()
		raw, err := w.Resolve(context.Background(), target, obj.stored(t).Leases)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := LedgerOf(raw)
		if len(l.Leases) != 0 || !containsMark(l, id(3)) || time.Since(start) > time.Second {
			t.Errorf("Resolve returned %s after %s", l, time.Since(start))
		}
	})
	t.Run("a lease that does not end: the last state read", func(t *testing.T) {
		obj := &fakeObject{exists: true, rv: 10, ledger: Ledger{}.WithLease(other, time.Now()).String()}
		w := NewWriter(obj, Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		raw, err := w.Resolve(ctx, target, obj.stored(t).Leases)
		if err != nil || !strings.Contains(string(raw), "r="+other) {
			t.Errorf("Resolve = %s, %v; want the state with the lease", raw, err)
		}
	})
	t.Run("a lease whose replica did not end it: given up on after leaseSettle", func(t *testing.T) {
		obj := &fakeObject{exists: true, rv: 10, ledger: Ledger{}.WithLease(other, time.Now().Add(-leaseSettle-time.Second)).String()}
		start := time.Now()
		raw, err := NewWriter(obj, Options{}).Resolve(context.Background(), target, obj.stored(t).Leases)
		if err != nil || !strings.Contains(string(raw), "r="+other) || time.Since(start) > time.Second {
			t.Errorf("Resolve = %s, %v after %s; want the state with the lease at once", raw, err, time.Since(start))
		}
	})
	t.Run("gone", func(t *testing.T) {
		w := NewWriter(&fakeObject{}, Options{})
		if raw, err := w.Resolve(context.Background(), target, []Lease{{other, time.Now()}}); raw != nil || err != nil {
			t.Errorf("Resolve = %s, %v; want nil, nil", raw, err)
		}
	})
}
