package kcpcontract

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// call is one AdmissionReview the recorder received.
type call struct {
	// Endpoint is the first segment of the URL path: which configuration
	// (of which spec) kcp called.
	Endpoint    string
	UID         types.UID
	Operation   admissionv1.Operation
	Name        string
	Namespace   string
	Resource    metav1.GroupVersionResource
	SubResource string
	DryRun      bool
	User        authenticationv1.UserInfo
	Object      *unstructured.Unstructured
	OldObject   *unstructured.Unstructured
	Options     *unstructured.Unstructured
	// PeerCertificates is how many certificates the client presented.
	PeerCertificates int
}

// objectName is the name of the object the request is about: the request's
// name, or else the name in the (old) object.
func (c call) objectName() string {
	switch {
	case c.Name != "":
		return c.Name
	case c.OldObject != nil:
		return c.OldObject.GetName()
	case c.Object != nil:
		return c.Object.GetName()
	}
	return ""
}

// cluster is the kcp.io/cluster annotation of the object, or else of the
// old object.
func (c call) cluster() string {
	for _, o := range []*unstructured.Unstructured{c.Object, c.OldObject} {
		if o != nil && o.GetAnnotations()[logicalcluster.AnnotationKey] != "" {
			return o.GetAnnotations()[logicalcluster.AnnotationKey]
		}
	}
	return ""
}

// byOperation returns the calls of operation op.
func byOperation(calls []call, op admissionv1.Operation) []call {
	var out []call
	for _, c := range calls {
		if c.Operation == op {
			out = append(out, c)
		}
	}
	return out
}

// oldVersions returns the resourceVersions of the old objects of calls.
func oldVersions(calls []call) []string {
	out := make([]string, 0, len(calls))
	for _, c := range calls {
		out = append(out, c.OldObject.GetResourceVersion())
	}
	return out
}

// jsonPatchOp is one operation of an RFC 6902 JSON patch.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// verdict is a responder's answer.
type verdict struct {
	Allowed bool
	Code    int32
	Message string
	// Patch is applied to the object (mutating configurations only).
	Patch []jsonPatchOp
	// Details go with a denial.
	Details *metav1.StatusDetails
}

// allow is the verdict of a responder that lets everything pass.
var allow = verdict{Allowed: true}

// deny refuses with 403 and message.
func deny(message string) verdict {
	return verdict{Code: http.StatusForbidden, Message: message}
}

// responder answers a review; ctx ends with kcp's request.
type responder func(ctx context.Context, c call) verdict

// recorder is an HTTPS admission webhook that records every AdmissionReview
// and answers with the responder registered for the URL's first path
// segment (allow when there is none). It requests, but does not require, a
// client certificate, so that a spec can see whether kcp presents one.
type recorder struct {
	// URL is https://127.0.0.1:<port>; a configuration's URL is URL/<endpoint>.
	URL string
	// CABundle is the PEM CA of the serving certificate.
	CABundle []byte
	// CA issued the serving certificate; it can issue client certificates
	// too.
	CA *kcpenv.CA

	server *http.Server

	lock       sync.Mutex
	calls      []call
	responders map[string]responder
}

// startRecorder serves the recorder on a free port of 127.0.0.1 until
// stop is called.
func startRecorder() (*recorder, error) {
	ca, err := kcpenv.NewCA("kcp contract suite CA")
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := ca.Issue("127.0.0.1", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &recorder{
		URL:        "https://" + l.Addr().String(),
		CABundle:   ca.PEM,
		CA:         ca,
		responders: map[string]responder{},
	}
	r.server = &http.Server{
		Handler:           r,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequestClientCert,
		},
	}
	go func() {
		if err := r.server.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(fmt.Sprintf("recorder: %v", err))
		}
	}()
	return r, nil
}

// stop stops serving.
func (r *recorder) stop(ctx context.Context) error {
	return r.server.Shutdown(ctx)
}

// endpointURL is the URL of a configuration for endpoint.
func (r *recorder) endpointURL(endpoint string) string {
	return r.URL + "/" + endpoint
}

// respond makes f answer the reviews of endpoint, until the returned
// function is called; then the endpoint allows everything again.
func (r *recorder) respond(endpoint string, f responder) (unregister func()) {
	r.lock.Lock()
	defer r.lock.Unlock()
	r.responders[endpoint] = f
	return func() {
		r.lock.Lock()
		defer r.lock.Unlock()
		delete(r.responders, endpoint)
	}
}

// callsTo returns the calls of endpoint for which match (if not nil) is
// true, in the order they arrived.
func (r *recorder) callsTo(endpoint string, match func(call) bool) []call {
	r.lock.Lock()
	defer r.lock.Unlock()
	var out []call
	for _, c := range r.calls {
		if c.Endpoint == endpoint && (match == nil || match(c)) {
			out = append(out, c)
		}
	}
	return out
}

// all returns every call received.
func (r *recorder) all() []call {
	r.lock.Lock()
	defer r.lock.Unlock()
	return append([]call(nil), r.calls...)
}

// ServeHTTP records an AdmissionReview and answers it.
func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	in := review.Request
	c := call{
		Endpoint:    strings.SplitN(strings.TrimPrefix(req.URL.Path, "/"), "/", 2)[0],
		UID:         in.UID,
		Operation:   in.Operation,
		Name:        in.Name,
		Namespace:   in.Namespace,
		Resource:    in.Resource,
		SubResource: in.SubResource,
		DryRun:      in.DryRun != nil && *in.DryRun,
		User:        in.UserInfo,
		Object:      decode(in.Object.Raw),
		OldObject:   decode(in.OldObject.Raw),
		Options:     decode(in.Options.Raw),
	}
	if req.TLS != nil {
		c.PeerCertificates = len(req.TLS.PeerCertificates)
	}

	r.lock.Lock()
	r.calls = append(r.calls, c)
	f := r.responders[c.Endpoint]
	r.lock.Unlock()

	v := allow
	if f != nil {
		v = f(req.Context(), c)
	}
	out := &admissionv1.AdmissionResponse{UID: in.UID, Allowed: v.Allowed}
	if !v.Allowed {
		out.Result = &metav1.Status{Status: metav1.StatusFailure, Code: v.Code, Message: v.Message, Reason: metav1.StatusReasonForbidden, Details: v.Details}
	}
	if len(v.Patch) > 0 {
		patch, err := json.Marshal(v.Patch)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out.Patch = patch
		out.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
	}
	review.Request = nil
	review.Response = out
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

// decode returns the object of raw JSON, or nil if there is none.
func decode(raw []byte) *unstructured.Unstructured {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		// Options of a DELETE have a kind; an object without one still
		// decodes as a map.
		m := map[string]any{}
		if json.Unmarshal(raw, &m) != nil {
			return nil
		}
		u.Object = m
	}
	return u
}
