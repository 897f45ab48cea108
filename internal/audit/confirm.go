package audit

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// Reader reads the protected objects that a set of targets leaves out:
// those labelled cleared (see sources.TargetsSelector). *objects.Client
// implements it.
type Reader interface {
	// Get reads an object; one that does not exist is a NotFound error.
	Get(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string) ([]byte, error)
	// ListObjectsIn lists the objects of src in cluster that labelSelector
	// selects.
	ListObjectsIn(ctx context.Context, src index.Source, cluster logicalcluster.Name, labelSelector string, keep func(kcp.Meta, []byte) bool, visit func(kcp.Meta, []byte) error) error
}

// maxReadsPerPass bounds how many objects a pass reads; the next passes
// read those left.
const maxReadsPerPass = 64

// readBudget bounds the time a pass spends reading objects.
const readBudget = 10 * time.Second

// targetObject is an object that a reference names: its protected type and
// workspace, and its namespace and name, or only its name where the
// reference names an object of that name in any namespace.
type targetObject struct {
	target          targetType
	cluster         logicalcluster.Name
	namespace, name string
	anyNamespace    bool
}

// objectOf returns the object that the reference k names.
func objectOf(k refKey) targetObject {
	return targetObject{target: k.target, cluster: k.cluster, namespace: k.targetNamespace, name: k.targetName, anyNamespace: k.anyNamespace}
}

// suspect is an object missing from its set of targets, and the
// references to it that a pass found.
type suspect struct {
	// src is the protected type as a rule names it, to read the object.
	src  index.Source
	refs []suspectRef
}

// suspectRef is a reference to a suspect: its key, the check that found
// it and the dependent's metadata.
type suspectRef struct {
	key   refKey
	check *check
	meta  kcp.Meta
}

// suspectOf notes in missing that the reference k, which the dependent with
// metadata meta holds under the rule of c, names an object missing from
// its set of targets.
func suspectOf(missing map[targetObject]*suspect, k refKey, c *check, meta kcp.Meta) {
	o := objectOf(k)
	s, ok := missing[o]
	if !ok {
		s = &suspect{src: c.target}
		missing[o] = s
	}
	s.refs = append(s.refs, suspectRef{key: k, check: c, meta: meta})
}

// confirm decides which objects of missing do not exist, and adds the
// references to them to found. A set of targets holds only the objects
// not labelled cleared, and earlier releases let anyone set that label, so
// an object missing from its set is read before the references to it count
// as dangling:
//
//   - one that exists is left alone for the grace period (a.hidden), and
//     read again after it;
//   - one that does not is read again once per grace period, so before
//     the references to it are reported and then every grace period,
//     until it comes into its set (an object created comes without the
//     label, which a CREATE does not keep) or nothing references it;
//   - one that cannot be read in this pass (a pass reads at most
//     maxReadsPerPass objects, within readBudget, or a read failed) keeps
//     the findings it had, and no new one.
//
// Without a Reader, an object missing from its set does not exist.
func (a *Auditor) confirm(ctx context.Context, missing map[targetObject]*suspect, found map[refKey]*finding, now time.Time) {
	for o, at := range a.hidden {
		if _, still := missing[o]; !still || now.Sub(at) >= a.opts.GracePeriod {
			delete(a.hidden, o)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, readBudget)
	defer cancel()
	reads := 0
	for o, s := range missing {
		if _, exists := a.hidden[o]; exists {
			continue
		}
		if a.opts.Reader == nil {
			a.foundAll(found, s, now, time.Time{})
			continue
		}
		if at, ok := a.confirmedMissing(s, now); ok {
			a.foundAll(found, s, now, at)
			continue
		}
		if reads >= maxReadsPerPass || rctx.Err() != nil {
			a.keep(found, s)
			continue
		}
		reads++
		exists, err := a.exists(rctx, o, s.src)
		switch {
		case err != nil:
			a.opts.Metrics.read(readFailed)
			log.FromContext(ctx).V(1).Info("Cannot read an object that a reference names", "resource", s.src.Resource.GroupResource(), "cluster", o.cluster, "namespace", o.namespace, "name", o.name, "error", err)
			a.keep(found, s)
		case exists:
			a.opts.Metrics.read(readExists)
			a.hidden[o] = now
		default:
			a.opts.Metrics.read(readMissing)
			a.foundAll(found, s, now, now)
		}
	}
}

// confirmedMissing returns when a read last found the object of s
// missing, if that was less than the grace period before now.
func (a *Auditor) confirmedMissing(s *suspect, now time.Time) (time.Time, bool) {
	var last time.Time
	for _, r := range s.refs {
		if f, ok := a.findings[r.key]; ok && f.confirmed.After(last) {
			last = f.confirmed
		}
	}
	return last, !last.IsZero() && now.Sub(last) < a.opts.GracePeriod
}

// foundAll adds every reference to s to found, as confirmed missing at
// confirmed.
func (a *Auditor) foundAll(found map[refKey]*finding, s *suspect, now, confirmed time.Time) {
	for _, r := range s.refs {
		f := a.found(found, r.key, r.check, r.meta, now)
		if confirmed.After(f.confirmed) {
			f.confirmed = confirmed
		}
	}
}

// keep adds to found the references to s that were findings, as they
// were.
func (a *Auditor) keep(found map[refKey]*finding, s *suspect) {
	for _, r := range s.refs {
		if f, ok := a.findings[r.key]; ok {
			found[r.key] = f
		}
	}
}

// exists reads whether the object o of src exists: by name, or, for a
// name in any namespace, among the objects of its workspace labelled
// cleared (its set of targets holds the others).
func (a *Auditor) exists(ctx context.Context, o targetObject, src index.Source) (bool, error) {
	if o.anyNamespace {
		named := false
		err := a.opts.Reader.ListObjectsIn(ctx, src, o.cluster, depv1alpha1.LabelCleared, nil, func(m kcp.Meta, _ []byte) error {
			named = named || m.Name == o.name
			return nil
		})
		return named, err
	}
	_, err := a.opts.Reader.Get(ctx, src, o.cluster, o.namespace, o.name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
