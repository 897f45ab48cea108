// Package webhook is what the admission handlers of the webhook binary
// share: the HTTP entry point that serves them (controller-runtime's
// admission.Webhook, with the provider workspace, the endpoint, the
// labelling scheme and kcp's timeout taken from the request URL, and the
// budget of a decision), the Handler that routes kcp's requests by endpoint
// and operation, the decoding of the object a request is about
// (ReadSubject, and ReadWriteSubject for a CREATE or UPDATE, whose
// workspace is the old object's on an UPDATE), the answers every handler may give (NotLoaded,
// Unavailable, Misdirected), the decisions and their audit annotation, the
// Metrics of every handler, and the client authentication of the HTTPS
// server (ClientAuth).
//
// The handlers live in subpackages by job, which import this package and
// not each other (nor does this package import them):
//
//   - package deletion: the Validator that kcp calls for DELETE requests on
//     protected resources, with kcp's teardown and the breaking of cycles
//     of references in it, the message that names the blockers, and the
//     deferral of deletions under Replay rules;
//   - package references: the ReferenceValidator that kcp calls for CREATE
//     and UPDATE requests on dependents, and the LabelMutator that sets
//     their reference labels;
//   - package guard: the RecordGuard of the webhook's records on protected
//     objects, the LedgerGuard of their ledgers of admitted references, the
//     SkipGuard of skip-protection on them, and the webhook's own identity
//     that may write records and ledgers.
//
// Until the rule registry is loaded, every handler that needs the rules
// denies with a message to retry (NotLoaded).
package webhook
