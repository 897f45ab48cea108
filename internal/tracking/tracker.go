package tracking

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/buger/jsonparser"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

// Kind is what a probe looks for.
type Kind string

const (
	// KindLabelling is the labelling webhook of a dependent type, with the
	// scheme of its current rules.
	KindLabelling Kind = "labelling"
	// KindGuard is the guard of the ledger of admitted references, and of
	// the label that says an object is cleared, on a protected type.
	KindGuard Kind = "guard"
	// KindCheck is the check of new references of a dependent type whose
	// dependents cannot be labelled, which records their references, for
	// the references of its current rules (Key.Scheme: CheckScheme).
	KindCheck Kind = "check"
)

// CheckProbePrefix starts the name that a probe of the check of new
// references sets a reference to: the check answers a dry run of the
// webhook's own user that adds a reference to such a name with
// CheckProbeAnswer, before it reads anything.
const CheckProbePrefix = "dependency-probe-"

// CheckProbeAnswer is the message with which the check of new references
// refuses its probe that adds a reference to name, with answer, the
// signed answer (Answers.Sign of KindCheck and name; none if answers are
// not signed).
func CheckProbeAnswer(name, answer string) string {
	msg := fmt.Sprintf("the check of new references is in effect: probe %q", name)
	if answer != "" {
		msg += " (answer " + answer + ")"
	}
	return msg
}

// checkProbeAnswered returns the signed answer in msg, a refusal of the
// probe that added a reference to name, and whether msg is
// CheckProbeAnswer's refusal of it at all.
func checkProbeAnswered(msg, name string) (string, bool) {
	unsigned := CheckProbeAnswer(name, "")
	i := strings.Index(msg, unsigned)
	if i < 0 {
		return "", false
	}
	rest, ok := strings.CutPrefix(msg[i+len(unsigned):], " (answer ")
	if !ok {
		return "", true
	}
	answer, _, _ := strings.Cut(rest, ")")
	return answer, true
}

// CheckScheme returns the fingerprint of the references that a probe of
// the check of new references covers (Key.Scheme of KindCheck): another
// set of references is another probe.
func CheckScheme(refs []fieldpath.Reference) string {
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = r.String()
	}
	slices.Sort(names)
	sum := sha256.Sum256([]byte(strings.Join(slices.Compact(names), "\n")))
	return hex.EncodeToString(sum[:8])
}

// Key names what is probed: a webhook, for a source, on the shard whose
// virtual workspace URL is Shard; Scheme is the fingerprint of the scheme
// of a labelling webhook, or, for KindCheck, of the references probed
// (CheckScheme).
type Key struct {
	Kind   Kind
	Source index.Source
	Shard  string
	Scheme string
}

// Object is an object of a source to probe with.
type Object struct {
	Cluster   logicalcluster.Name
	Namespace string
	Name      string
	// References are, for KindCheck, the references to probe the check
	// with (those that Key.Scheme names).
	References []fieldpath.Reference
}

// Prober sends dry-run patches; *objects.Client implements it.
type Prober interface {
	// DryRunPatch sends a dry-run merge patch of the object and returns the
	// object as admission left it.
	DryRunPatch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, body []byte) ([]byte, error)
	// DryRunPatchStatus does the same through the status subresource; a
	// resource without one answers NotFound.
	DryRunPatchStatus(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, body []byte) ([]byte, error)
	// Get reads the object.
	Get(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string) ([]byte, error)
}

// Options configure a Tracker.
type Options struct {
	// Recheck is how often a webhook found in effect is probed again
	// (default 5m).
	Recheck time.Duration
	// Retry is the least time between two probes that did not tell
	// (default 5s).
	Retry time.Duration
	// Timeout bounds one probe (default 10s).
	Timeout time.Duration
	// Answers verifies the answers of the webhook (nil: every answer
	// counts); they are signed with the same secrets.
	Answers *Answers
}

// Tracker knows since when webhooks are in effect on each shard; see the
// package documentation. It is safe for concurrent use, and probes in the
// background.
type Tracker struct {
	prober Prober
	opts   Options
	now    func() time.Time

	lock   sync.Mutex
	states map[Key]*state
}

type state struct {
	// since is when a probe first showed the webhook in effect, in a row
	// of probes that all did; zero if the last one that told did not.
	since   time.Time
	checked time.Time
	tried   time.Time
	running bool
	// why says why the last probe did not show the webhook in effect;
	// empty if it did, or none has ended.
	why string
}

// New returns a Tracker that probes with prober.
func New(prober Prober, opts Options) *Tracker {
	if opts.Recheck <= 0 {
		opts.Recheck = 5 * time.Minute
	}
	if opts.Retry <= 0 {
		opts.Retry = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	return &Tracker{prober: prober, opts: opts, now: time.Now, states: map[Key]*state{}}
}

// Since returns since when the webhook that key names has been in effect,
// and false while that is not known. If it is not known, was found not in
// effect Retry ago, or in effect Recheck ago, it probes with obj (an object of key.Source on
// key.Shard) in the background, unless a probe is running or one that did
// not tell ended less than Retry ago; a later call has the answer.
func (t *Tracker) Since(ctx context.Context, key Key, obj Object) (time.Time, bool) {
	now := t.now()
	t.lock.Lock()
	defer t.lock.Unlock()
	s, ok := t.states[key]
	if !ok {
		s = &state{}
		t.states[key] = s
	}
	// Found in effect: checked again every Recheck; not (yet): every Retry.
	stale := s.checked.IsZero() || now.Sub(s.checked) >= t.opts.Recheck || s.since.IsZero() && now.Sub(s.checked) >= t.opts.Retry
	if stale && !s.running && now.Sub(s.tried) >= t.opts.Retry && obj.Name != "" {
		s.running, s.tried = true, now
		go t.probe(log.IntoContext(context.WithoutCancel(ctx), log.FromContext(ctx)), key, obj)
	}
	return s.since, !s.since.IsZero()
}

// probe probes key with obj and records what it showed.
func (t *Tracker) probe(ctx context.Context, key Key, obj Object) {
	ctx, cancel := context.WithTimeout(ctx, t.opts.Timeout)
	defer cancel()
	inEffect, err := t.check(ctx, key, obj)
	now := t.now()
	t.lock.Lock()
	defer t.lock.Unlock()
	s := t.states[key]
	s.running = false
	if err != nil {
		log.FromContext(ctx).V(1).Info("A probe of an admission webhook did not tell", "webhook", key.Kind, "source", key.Source, "shard", key.Shard, "error", err.Error())
		s.why = probeFailure(key.Kind, err)
		return
	}
	s.checked = now
	logger := log.FromContext(ctx).V(1).WithValues("webhook", key.Kind, "source", key.Source, "shard", key.Shard)
	switch {
	case !inEffect:
		if s.why != notInEffect {
			logger.Info("A probe found an admission webhook not in effect")
		}
		s.since, s.why = time.Time{}, notInEffect
	case s.since.IsZero():
		logger.Info("A probe found an admission webhook in effect")
		s.since, s.why = now, ""
	default:
		s.why = ""
	}
}

// notInEffect is why a probe that found the webhook not in effect says.
const notInEffect = "the last probe found it not in effect"

// Why says why the last probe of key that ended did not show the webhook
// in effect, for a condition's message: stable across probes that fail
// alike (it names no throwaway value); empty if it did or none has ended.
func (t *Tracker) Why(key Key) string {
	t.lock.Lock()
	defer t.lock.Unlock()
	if s, ok := t.states[key]; ok {
		return s.why
	}
	return ""
}

// probeFailure says how a probe failed, without the details that differ
// from probe to probe (the webhook's log has them).
func probeFailure(kind Kind, err error) string {
	if st := apierrors.APIStatus(nil); errors.As(err, &st) {
		status := st.Status()
		msg := fmt.Sprintf("the last probe failed: %d %s", status.Code, status.Reason)
		if status.Code == http.StatusForbidden {
			what := "a dependent"
			if kind == KindGuard {
				what = "a protected object"
			}
			msg += fmt.Sprintf(" (a probe is a dry-run patch of %s through its provider's virtual workspace, for which the webhook needs patch on apiexports/content of that provider's APIExport)", what)
		}
		return msg
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "the last probe timed out"
	}
	return "the last probe failed (the webhook's log at -v=1 says why)"
}

// probeValue is the throwaway value a probe writes; no webhook keeps it.
func probeValue() string {
	return ProbeValuePrefix + rand.String(8)
}

// check sends the probe of key and tells whether the webhook ran. The
// guard's probe is two writes: a throwaway ledger, and then a throwaway
// label that says the object is cleared, alone; the guard is in effect
// only if it kept the stored value of both. The second shows that kcp
// calls the guard for a write of the label alone, which the DELETE
// webhook's object selector relies on (see webhookconfig.AdmittedCondition).
// The webhook answers each probe with a signed answer (see Answers); one
// that does not verify shows the webhook not in effect.
func (t *Tracker) check(ctx context.Context, key Key, obj Object) (bool, error) {
	switch key.Kind {
	case KindLabelling:
		value := probeValue()
		got, answer, err := t.send(ctx, key, obj, "labels", depv1alpha1.LabelReferencesScheme, value)
		if err != nil {
			return false, err
		}
		// The labelling webhook sets the scheme label only when the scheme
		// it was configured for is the scheme of its own rules (to TooMany
		// of it on a dependent with too many references for labels).
		return reflabels.LabelledUnder(got, key.Scheme) && t.opts.Answers.Valid(KindLabelling, value, key.Scheme, answer), nil
	case KindGuard:
		for _, probe := range []struct{ field, name string }{
			{"annotations", depv1alpha1.AnnotationAdmittedReferences},
			{"labels", depv1alpha1.LabelCleared},
		} {
			value := probeValue()
			got, answer, err := t.send(ctx, key, obj, probe.field, probe.name, value)
			if err != nil {
				return false, err
			}
			// The guard keeps the stored value, whatever the write says.
			if got == value || !t.opts.Answers.Valid(KindGuard, value, "", answer) {
				return false, nil
			}
		}
		return true, nil
	case KindCheck:
		return t.checkCheck(ctx, key, obj)
	default:
		return false, fmt.Errorf("unknown probe %q", key.Kind)
	}
}

// checkCheck probes the check of new references: for each top-level field
// that the references lie in (kcp calls the check only for a write that
// changes one of the fields its configuration names, see
// webhookconfig.ReferencesCondition), a dry-run patch that sets one of
// them to a throwaway name, through the status subresource for the status
// (or, for a resource without one, the resource itself). Where the
// resource's schema refuses the reference set alone (a list whose elements
// need other fields), the patch renames one the object holds instead,
// with the rest of the field as it is. The check is in effect only if it
// refused every one with CheckProbeAnswer and an answer that verifies (one
// that does not shows it not in effect); a patch refused otherwise (by the
// resource's schema, say, on an object that holds no such reference) tells
// nothing.
func (t *Tracker) checkCheck(ctx context.Context, key Key, obj Object) (bool, error) {
	if len(obj.References) == 0 {
		return false, errors.New("no reference to probe the check of new references with")
	}
	byField := map[string][]fieldpath.Reference{}
	for _, r := range obj.References {
		field := r.Name().Steps()[0]
		byField[field] = append(byField[field], r)
	}
	for _, field := range slices.Sorted(maps.Keys(byField)) {
		name := CheckProbePrefix + rand.String(8)
		body, err := json.Marshal(byField[field][0].Sample(name))
		if err != nil {
			return false, err
		}
		sendErr := t.sendCheck(ctx, key, obj, field, body)
		if apierrors.IsInvalid(sendErr) || apierrors.IsBadRequest(sendErr) {
			var renamed bool
			if body, renamed, err = t.renamed(ctx, key, obj, byField[field], field, name); err != nil {
				return false, err
			}
			if renamed {
				sendErr = t.sendCheck(ctx, key, obj, field, body)
			}
		}
		answer, answered := "", false
		if apierrors.IsForbidden(sendErr) {
			answer, answered = checkProbeAnswered(sendErr.Error(), name)
		}
		switch {
		case sendErr == nil:
			// Admitted: the check did not run for this field.
			return false, nil
		case answered && !t.opts.Answers.Valid(KindCheck, name, "", answer):
			// Refused as the check would, but not by it.
			return false, nil
		case answered:
			// The check ran.
		default:
			code, reason := int32(0), metav1.StatusReason("")
			if st := apierrors.APIStatus(nil); errors.As(sendErr, &st) {
				code, reason = st.Status().Code, st.Status().Reason
			}
			return false, fmt.Errorf("the probe of %s did not tell (%d %s): %w", field, code, reason, sendErr)
		}
	}
	return true, nil
}

// sendCheck sends the dry-run merge patch body of the top-level field of
// obj: through the status subresource for the status, or the resource
// itself where it has none.
func (t *Tracker) sendCheck(ctx context.Context, key Key, obj Object, field string, body []byte) error {
	if field != "status" {
		_, err := t.prober.DryRunPatch(ctx, key.Source, obj.Cluster, obj.Namespace, obj.Name, body)
		return err
	}
	_, err := t.prober.DryRunPatchStatus(ctx, key.Source, obj.Cluster, obj.Namespace, obj.Name, body)
	if apierrors.IsNotFound(err) {
		// No status subresource: the status is written with the object
		// (or the object is gone, which the next patch tells).
		_, err = t.prober.DryRunPatch(ctx, key.Source, obj.Cluster, obj.Namespace, obj.Name, body)
	}
	return err
}

// renamed reads obj and returns the merge patch of its top-level field that
// renames one of the references refs (which lie in it) that it holds to
// name, keeping the rest of the field; false if it holds none.
func (t *Tracker) renamed(ctx context.Context, key Key, obj Object, refs []fieldpath.Reference, field, name string) ([]byte, bool, error) {
	raw, err := t.prober.Get(ctx, key.Source, obj.Cluster, obj.Namespace, obj.Name)
	if err != nil {
		return nil, false, fmt.Errorf("failed to read the object to probe with: %w", err)
	}
	for _, r := range refs {
		if renamed, ok := r.Rename(raw, name); ok {
			body, err := json.Marshal(map[string]any{field: renamed[field]})
			return body, err == nil, err
		}
	}
	return nil, false, nil
}

// send sends a dry-run patch of obj that sets the key name of its metadata
// field (labels or annotations) to value, and returns the value admission
// left there and the webhook's answer (api/v1alpha1.AnnotationProbeAnswer),
// "" for none.
func (t *Tracker) send(ctx context.Context, key Key, obj Object, field, name, value string) (string, string, error) {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{field: map[string]string{name: value}}})
	if err != nil {
		return "", "", err
	}
	raw, err := t.prober.DryRunPatch(ctx, key.Source, obj.Cluster, obj.Namespace, obj.Name, body)
	if err != nil {
		return "", "", err
	}
	got, err := metadataValue(raw, field, name)
	if err != nil {
		return "", "", err
	}
	answer, err := metadataValue(raw, "annotations", depv1alpha1.AnnotationProbeAnswer)
	if err != nil {
		return "", "", err
	}
	return got, answer, nil
}

// metadataValue returns the key name of the metadata field (labels or
// annotations) of the object raw, "" for none.
func metadataValue(raw []byte, field, name string) (string, error) {
	got, err := jsonparser.GetString(raw, "metadata", field, name)
	if err != nil && !errors.Is(err, jsonparser.KeyPathNotFoundError) {
		return "", fmt.Errorf("failed to read the probed object: %w", err)
	}
	return got, nil
}
