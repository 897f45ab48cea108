// Package tracking tells since when the admission webhooks that record
// references (see package inflight) are in effect, and reports it on the
// rules.
//
// An allowed DELETE may skip reading dependents only if every reference
// added since some moment was recorded on the object it names, and nobody
// but the webhook changed those records. Both rest on admission webhooks
// that the controller installs: the labelling webhook of each dependent
// type, with the scheme of its current rules, records the references; the
// guard of the ledger on each protected type keeps the records. kcp applies
// a configuration on each shard once that shard has read it, and nothing
// but a request through that shard shows that it has. So the Tracker
// probes, per shard: a dry-run PATCH of an object through its provider's
// virtual workspace that only the webhook in question would revert (a
// throwaway scheme label of a dependent; a throwaway ledger of a protected
// object, and then a throwaway cleared label alone, since the guard keeps
// that label too) or refuse (a reference of a dependent whose type cannot
// be labelled set to a throwaway name, which the check of new references,
// which records such references, answers with CheckProbeAnswer), whose
// answer shows whether it ran. The webhook signs its answers (Answers),
// so that another admission webhook that imitates it cannot pass for it.
// From the first probe that
// shows it, it stays in effect (a shard applies configurations in order)
// until the scheme changes, or a later probe, every few minutes, shows it
// gone.
//
// The Reporter, on the webhook's elected replica, writes the rules'
// ReferencesTracked condition: True once their dependents are labelled (or
// cannot be, and a probe showed the check of new references in effect) and
// the webhook may patch every type they protect (the grant it needs to
// record references), False naming what is missing. Its lastTransitionTime
// is when the webhook began to record the rule's references: replicas
// decide deletes without reading only MaxInFlight after it, and admit a
// reference they cannot record only a while after it turned False.
package tracking
