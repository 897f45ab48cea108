// Package denial reads the dependency webhook's answer to a DELETE as a
// client receives it: the verdict, and the blockers from the denial's
// status details (one cause of type CauseBlocker per blocker, whose message
// is the blocker as JSON, and one of type CauseBlockers with their number;
// see internal/webhook/deletion), or, from a webhook of an earlier release,
// from its message. `kubectl dependencies why` prints it.
package denial

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The cause types of the webhook's denials, as internal/webhook/deletion
// writes them.
const (
	CauseBlocker  metav1.CauseType = "dependencies.opendefense.cloud/blocker"
	CauseBlockers metav1.CauseType = "dependencies.opendefense.cloud/blockers"
)

// Verdict is what would become of a DELETE.
type Verdict string

// Verdicts.
const (
	// Allowed: the DELETE would be admitted now.
	Allowed Verdict = "Allowed"
	// Blocked: dependents still reference the object.
	Blocked Verdict = "Blocked"
	// WouldBeDeferred: dependents still reference the object, and under a
	// Replay rule a real DELETE would be recorded and replayed once they
	// are gone.
	WouldBeDeferred Verdict = "WouldBeDeferred"
	// InFlight: a reference to the object is being admitted (409); ask
	// again after RetryAfterSeconds.
	InFlight Verdict = "InFlight"
	// Refused: the DELETE would be refused for another reason than
	// dependents (RBAC, another admission webhook).
	Refused Verdict = "Refused"
)

// Banner is how a verdict is shown to people: ALLOWED, BLOCKED, WOULD BE
// DEFERRED, IN FLIGHT, REFUSED.
func (v Verdict) Banner() string {
	switch v {
	case WouldBeDeferred:
		return "WOULD BE DEFERRED"
	case InFlight:
		return "IN FLIGHT"
	}
	return strings.ToUpper(string(v))
}

// Blocker is a dependent that blocks the DELETE.
type Blocker struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Rule is the rule under which it references the object
	// (<logical cluster>/<name>), Path the field path.
	Rule string `json:"rule,omitempty"`
	Path string `json:"path,omitempty"`
}

// Answer is the webhook's answer to a DELETE.
type Answer struct {
	Verdict Verdict `json:"verdict"`
	// Message is the server's message, for every verdict but Allowed.
	Message string `json:"message,omitempty"`
	// Blockers are those the denial lists; Total is how many there are
	// (the denial lists at most 1,000 in its details and 10 in its
	// message).
	Blockers []Blocker `json:"blockers,omitempty"`
	Total    int       `json:"total,omitempty"`
	// RetryAfterSeconds is when to ask again (InFlight).
	RetryAfterSeconds int32 `json:"retryAfterSeconds,omitempty"`
}

// Read reads the answer to a DELETE, err being what the client returned:
// nil is Allowed; a denial of the dependency webhook is Blocked or
// WouldBeDeferred; its 409 is InFlight; any other 403 is Refused. Anything
// else (the object does not exist, the webhook asks to retry, kcp is
// unavailable) is returned as an error.
func Read(err error) (Answer, error) {
	if err == nil {
		return Answer{Verdict: Allowed}, nil
	}
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return Answer{}, err
	}
	st := se.Status()
	a := Answer{Message: st.Message}
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			switch c.Type {
			case CauseBlocker:
				var b Blocker
				if json.Unmarshal([]byte(c.Message), &b) == nil && b.Name != "" {
					a.Blockers = append(a.Blockers, b)
				}
			case CauseBlockers:
				if n, err := strconv.Atoi(c.Message); err == nil {
					a.Total = n
				}
			}
		}
	}
	switch {
	case st.Code == http.StatusConflict && strings.Contains(st.Message, "in flight"):
		a.Verdict = InFlight
		if st.Details != nil {
			a.RetryAfterSeconds = st.Details.RetryAfterSeconds
		}
		return a, nil
	case len(a.Blockers) > 0 || a.Total > 0 || strings.Contains(st.Message, "is still referenced by "):
		if len(a.Blockers) == 0 && a.Total == 0 {
			a.Blockers, a.Total = blockersOfMessage(st.Message)
		}
		a.Total = max(a.Total, len(a.Blockers))
		a.Verdict = Blocked
		if strings.Contains(st.Message, "its deletion would be deferred") || strings.Contains(st.Message, "its deletion is deferred") {
			a.Verdict = WouldBeDeferred
		}
		return a, nil
	case st.Code == http.StatusForbidden:
		a.Verdict = Refused
		return a, nil
	}
	return Answer{}, err
}

// deniedBy is how kube-apiserver prefixes a webhook's denial.
var deniedBy = regexp.MustCompile(`^admission webhook "[^"]*" denied the request: `)

// WebhookMessage returns a denial's message without the prefix that names
// the webhook.
func WebhookMessage(msg string) string {
	return deniedBy.ReplaceAllString(msg, "")
}

// referencedBy finds the blockers in a denial's message: "... is still
// referenced by A, B and 3 more; delete these ...".
var referencedBy = regexp.MustCompile(`is still referenced by (.*?)(?: and (\d+) more)?; `)

// blockersOfMessage reads the blockers a denial's message names (at most
// 10 and how many more), for a webhook that sends no status details.
func blockersOfMessage(msg string) ([]Blocker, int) {
	m := referencedBy.FindStringSubmatch(msg)
	if m == nil {
		return nil, 0
	}
	var bs []Blocker
	for _, s := range strings.Split(m[1], ", ") {
		parts := strings.Split(s, "/")
		switch len(parts) {
		case 2:
			bs = append(bs, Blocker{Kind: parts[0], Name: parts[1]})
		case 3:
			bs = append(bs, Blocker{Kind: parts[0], Namespace: parts[1], Name: parts[2]})
		}
	}
	more, _ := strconv.Atoi(m[2])
	return bs, len(bs) + more
}
