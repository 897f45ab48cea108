package webhook

import (
	"context"
	"fmt"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// The Handler routes by endpoint, then by operation.
func TestHandlerRoutes(t *testing.T) {
	var got []string
	record := func(name string) admission.HandlerFunc {
		return func(context.Context, admission.Request) admission.Response {
			got = append(got, name)
			return admission.Allowed("")
		}
	}
	h := Handler{Deletion: record("deletion"), References: record("references"), Records: record("records"), Labels: record("labels"),
		Admitted: record("admitted"), SkipProtection: record("skip-protection")}
	for _, op := range []admissionv1.Operation{admissionv1.Delete, admissionv1.Create, admissionv1.Update, admissionv1.Connect} {
		h.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: op}})
	}
	for _, endpoint := range []string{EndpointRecords, EndpointLabels, EndpointAdmitted, EndpointSkipProtection} {
		h.Handle(WithEndpoint(context.Background(), endpoint, "fp"), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Update}})
	}
	if want := []string{"deletion", "references", "references", "records", "labels", "admitted", "skip-protection"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("routed to %v, want %v", got, want)
	}
}
