package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// maxReviewSize bounds the request body: an AdmissionReview for a DELETE
// carries one object, which the API server limits to a few MB.
const maxReviewSize = 7 << 20

// NewAdmissionHandler serves handler as a validating admission webhook. A
// request that is not a well-formed AdmissionReview (not a POST, not JSON, no
// request or uid, too large) is answered with HTTP 400 (or 413) and a plain
// text error; handler is only called for well-formed requests. A panic in
// handler is answered with an error response, not a crash.
func NewAdmissionHandler(handler admission.Handler) http.Handler {
	wh := &admission.Webhook{Handler: handler, RecoverPanic: ptr.To(true)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, status, err := readReview(r)
		if err != nil {
			http.Error(w, err.Error(), status)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json") // parameters such as charset were accepted above
		wh.ServeHTTP(w, r)
	})
}

// readReview reads the body of an admission request and checks that it is an
// AdmissionReview with a request.
func readReview(r *http.Request) ([]byte, int, error) {
	if r.Method != http.MethodPost {
		return nil, http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed; admission reviews are POSTed", r.Method)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, http.StatusBadRequest, fmt.Errorf("content type %q not supported; expected application/json", r.Header.Get("Content-Type"))
	}
	if r.Body == nil {
		return nil, http.StatusBadRequest, errors.New("request body is empty")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewSize+1))
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("failed to read the request body: %w", err)
	}
	if len(body) > maxReviewSize {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body exceeds %d bytes", maxReviewSize)
	}
	if err := checkReview(body); err != nil {
		return nil, http.StatusBadRequest, err
	}
	return body, http.StatusOK, nil
}

// checkReview checks the envelope of an AdmissionReview.
func checkReview(body []byte) error {
	var review struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Request    *struct {
			UID       string          `json:"uid"`
			Operation string          `json:"operation"`
			Resource  json.RawMessage `json:"resource"`
		} `json:"request"`
	}
	if err := json.Unmarshal(body, &review); err != nil {
		return fmt.Errorf("malformed AdmissionReview: %w", err)
	}
	switch {
	case review.Kind != "AdmissionReview":
		return fmt.Errorf("malformed AdmissionReview: kind is %q", review.Kind)
	case review.APIVersion != "admission.k8s.io/v1" && review.APIVersion != "admission.k8s.io/v1beta1":
		return fmt.Errorf("malformed AdmissionReview: apiVersion %q not supported", review.APIVersion)
	case review.Request == nil:
		return errors.New("malformed AdmissionReview: no request")
	case review.Request.UID == "":
		return errors.New("malformed AdmissionReview: request.uid is empty")
	case review.Request.Operation == "":
		return errors.New("malformed AdmissionReview: request.operation is empty")
	case len(review.Request.Resource) == 0:
		return errors.New("malformed AdmissionReview: request.resource is missing")
	}
	return nil
}
