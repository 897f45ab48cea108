package horizon

import (
	"testing"
	"time"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

func TestRead(t *testing.T) {
	tests := []struct {
		name          string
		raw           string
		wantMarks     int
		wantCreated   string
		wantMalformed bool
	}{
		{name: "no ledger", raw: `{"metadata":{"creationTimestamp":"2026-11-27T10:00:00Z"}}`, wantCreated: "2026-11-27T10:00:00Z"},
		{name: "a ledger", raw: `{"metadata":{"creationTimestamp":"2026-11-27T10:00:00Z","annotations":{"` + depv1alpha1.AnnotationAdmittedReferences + `":"v1 f=0 l=0 0123456789abcdef@1764212000000"}}}`,
			wantMarks: 1, wantCreated: "2026-11-27T10:00:00Z"},
		{name: "a ledger that does not parse", raw: `{"metadata":{"annotations":{"` + depv1alpha1.AnnotationAdmittedReferences + `":"nonsense"}}}`, wantMalformed: true},
		{name: "null annotations, no creation time", raw: `{"metadata":{"annotations":null}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Read([]byte(tt.raw))
			if o.Malformed != tt.wantMalformed || len(o.Ledger.Marks) != tt.wantMarks {
				t.Errorf("Read = %+v", o)
			}
			created := ""
			if !o.Created.IsZero() {
				created = o.Created.UTC().Format(time.RFC3339)
			}
			if created != tt.wantCreated {
				t.Errorf("created %q, want %q", created, tt.wantCreated)
			}
		})
	}
}
