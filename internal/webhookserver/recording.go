package webhookserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"time"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/records"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/replay"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/references"
)

// trackingInterval is how often the elected replica asks kcp whether the
// webhook may patch the protected types (the grant it needs to record
// references), and reports it on the rules.
const trackingInterval = 30 * time.Second

// recording assembles what the labelling webhook needs to record the
// references that writes of dependents add on the objects they name: the
// writer of ledgers (ledgers, through the protected providers' virtual
// workspaces),
// admission ids keyed with a secret the replicas share (derived from the
// record keys, if there are any; else each replica's own, and a second
// call of the webhook within one request recognizes only its own replica's
// id), and which admission ids the index has seen on the dependents of each
// protected type.
func (a *assembly) recording(recs *replay.Records, verifier references.Verifier, ledgers *inflight.Writer) references.Recording {
	return references.Recording{
		Guards:  a.reg,
		Targets: a.ix,
		Ledgers: ledgers,
		IDs:     inflight.NewIDs(admissionIDKey(recs)),
		Landed:  a.landed,
		Records: verifier,
		Timeout: a.opts.RequestTimeout,

		MaxReferences: a.opts.MaxReferencesPerObject,
		GracePeriod:   a.gracePeriod(),
	}
}

// admissionIDKey returns the key of admission ids: derived from the
// signing record key (only new ids are signed with it, and a second call
// within one request follows the first within moments), none without
// record keys.
func admissionIDKey(recs *replay.Records) func() []byte {
	return func() []byte {
		if ring := keyring(recs); ring != nil {
			return derive(ring.SigningSecret(), "admission ids")
		}
		return nil
	}
}

// answers signs the answers of the webhook to its own probes, with secrets
// the replicas share (derived from the record keys, each of which
// verifies, so that answers verify while keys rotate); without record keys
// they are not signed (see tracking.Answers).
func answers(recs *replay.Records) *tracking.Answers {
	return tracking.NewAnswers(sharedSecrets(recs, "probe answers"))
}

// sharedSecrets returns the secrets for purpose that the replicas share:
// one derived from each record key, the signing key's first; none without
// record keys.
func sharedSecrets(recs *replay.Records, purpose string) func() [][]byte {
	return func() [][]byte {
		ring := keyring(recs)
		if ring == nil {
			return nil
		}
		var secrets [][]byte
		for _, s := range ring.Secrets() {
			secrets = append(secrets, derive(s, purpose))
		}
		return secrets
	}
}

// keyring returns the current record keys, nil without any.
func keyring(recs *replay.Records) *records.Keyring {
	if recs == nil {
		return nil
	}
	return recs.Keys.Keyring()
}

// derive returns the secret for purpose derived from a record key.
func derive(secret []byte, purpose string) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(purpose))
	return mac.Sum(nil)
}

// landed tells which admission ids the index has seen on dependents of any
// type that references target.
func (a *assembly) landed(target index.Source) inflight.Landed {
	entries := a.reg.Find(registry.Target{Cluster: target.Export.Cluster, Resource: target.Resource.GroupResource()})
	return func(id string) (time.Time, bool) {
		for _, e := range entries {
			if t, ok := a.ix.Admitted(e.Dependent, id); ok {
				return t, true
			}
		}
		return time.Time{}, false
	}
}
