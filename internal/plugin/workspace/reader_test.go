package workspace

import (
	"context"
	"reflect"
	"testing"
)

func TestWarnings(t *testing.T) {
	var none *Warnings
	if got := none.All(); got != nil {
		t.Errorf("nil Warnings: All() = %q, want none", got)
	}
	w := &Warnings{}
	w.HandleWarningHeaderWithContext(context.Background(), 299, "-", "first")
	w.HandleWarningHeaderWithContext(context.Background(), 299, "-", "second")
	got := w.All()
	if want := []string{"first", "second"}; !reflect.DeepEqual(got, want) {
		t.Errorf("All() = %q, want %q", got, want)
	}
	got[0] = "changed"
	if w.All()[0] != "first" {
		t.Error("All() returns the Warnings' own slice")
	}
}
