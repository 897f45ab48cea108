package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// Subject is the object a request is about, with the workspaces of the
// request.
type Subject struct {
	kcp.Meta
	// Provider is the provider workspace whose webhook configuration kcp
	// called.
	Provider logicalcluster.Name
}

// ReadWriteSubject is ReadSubject of the object of a CREATE or UPDATE
// request. kcp sets the object's kcp.io/cluster annotation only on a
// CREATE; on an UPDATE the object carries what the request made of it (a
// server-side apply can drop it with the manager's other annotations, a
// client can change it), so the consumer's workspace comes from the old
// object, the stored state.
func ReadWriteSubject(ctx context.Context, req admission.Request) (*Subject, *admission.Response) {
	if req.Operation != admissionv1.Update {
		return ReadSubject(ctx, req.Object.Raw, "object")
	}
	old, errResp := ReadSubject(ctx, req.OldObject.Raw, "oldObject")
	if errResp != nil {
		return nil, errResp
	}
	m, errResp := readMeta(req.Object.Raw, "object")
	if errResp != nil {
		return nil, errResp
	}
	m.Cluster = old.Cluster
	return &Subject{Meta: m, Provider: old.Provider}, nil
}

// ReadSubject decodes the metadata of raw, the request's object or
// oldObject (named by field), and finds the workspaces of the request: the
// consumer's from the object's kcp.io/cluster annotation, which kcp sets,
// and the provider's from the request URL. A malformed request gets the
// response to answer.
func ReadSubject(ctx context.Context, raw []byte, field string) (*Subject, *admission.Response) {
	fail := func(err error) (*Subject, *admission.Response) {
		resp := admission.Errored(http.StatusBadRequest, err)
		return nil, &resp
	}
	m, errResp := readMeta(raw, field)
	if errResp != nil {
		return nil, errResp
	}
	s := &Subject{Meta: m}
	if s.Cluster.Empty() {
		return fail(fmt.Errorf("%s has no %s annotation; is the webhook called by kcp?", field, logicalcluster.AnnotationKey))
	}
	if !s.Cluster.IsValid() {
		return fail(fmt.Errorf("%s's %s annotation %q is not a logical cluster name", field, logicalcluster.AnnotationKey, s.Cluster))
	}
	var ok bool
	if s.Provider, ok = ProviderFrom(ctx); !ok {
		return fail(errors.New("the request URL names no provider workspace; the webhook configuration is not the one the dependency-controller installs"))
	}
	return s, nil
}

// readMeta decodes the metadata of raw, the request's field.
func readMeta(raw []byte, field string) (kcp.Meta, *admission.Response) {
	fail := func(err error) (kcp.Meta, *admission.Response) {
		resp := admission.Errored(http.StatusBadRequest, err)
		return kcp.Meta{}, &resp
	}
	if len(raw) == 0 {
		return fail(fmt.Errorf("the admission request has no %s", field))
	}
	if !json.Valid(raw) {
		return fail(fmt.Errorf("failed to decode %s: not valid JSON", field))
	}
	m, err := kcp.ReadMeta(raw)
	if err != nil {
		return fail(fmt.Errorf("failed to decode %s: %w", field, err))
	}
	return m, nil
}

// DisplayName names the subject in messages: its name, or for a CREATE
// with generateName, the prefix followed by "<generated>".
func (s *Subject) DisplayName() string {
	if s.Name == "" {
		return s.GenerateName + "<generated>"
	}
	return s.Name
}
