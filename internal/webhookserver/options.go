package webhookserver

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/opendefensecloud/dependency-controller/internal/audit"
	"github.com/opendefensecloud/dependency-controller/internal/command"
	"github.com/opendefensecloud/dependency-controller/internal/replay"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/references"
)

// validName is what a shard name may be: a DNS label, as it becomes part
// of the name of the webhook's lease.
var validName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// maxReferencesPerObject bounds --max-references-per-object: past it, even
// kcp's longest webhook timeout (30 s) does not cover the checks of a
// write's new references.
const maxReferencesPerObject = 10000

// maxReferenceLease bounds --reference-lease: a DELETE of an object waits
// for the leases on it to end within the webhook's answer, which kcp waits
// for at most 30 s, and a lease counts as a reference in flight until
// MaxInFlight after it ends if its replica stops holding it.
const maxReferenceLease = 5 * time.Second

// Options are the settings of the webhook, each bound to a command line flag
// of cmd/webhook by AddFlags.
type Options struct {
	// CommonOptions are the settings the controller has as well: the
	// APIExport serving DependencyRules, the manager's endpoints and leader
	// election, and how often all rules are listed again.
	command.CommonOptions
	// FrontProxyURL is where the APIExportEndpointSlices of the dependents'
	// APIExports are read, as <url>/clusters/<logical cluster>/...; empty
	// means the kubeconfig's server without its /clusters/ path.
	FrontProxyURL string
	// BindAddress is the address the HTTPS server listens on; empty for all
	// addresses.
	BindAddress string
	// Port is the HTTPS port.
	Port int
	// CertDir holds the serving certificate and key, reloaded on change.
	CertDir string
	// CertName and KeyName are the file names in CertDir.
	CertName, KeyName string
	// ClientCAFile is a PEM bundle of the CAs whose client certificates the
	// webhook accepts, re-read every ClientCACheckInterval; empty accepts
	// any caller.
	ClientCAFile string
	// AllowedClientNames restricts the accepted client certificates to
	// these common or DNS names.
	AllowedClientNames []string
	// ClientCACheckInterval is how often ClientCAFile is re-read.
	ClientCACheckInterval time.Duration
	// Path is the HTTP path of the validating endpoint; kcp calls
	// <Path>/<logical cluster of the provider workspace>.
	Path string
	// RequestTimeout bounds the live reads per request; the time kcp waits
	// for the answer, which it sends with every request, bounds them too.
	RequestTimeout time.Duration
	// MaxBlockers is how many blockers a denial names.
	MaxBlockers int
	// MaxReferencesPerObject is how many objects one dependent may
	// reference under the rules of its type: a write that adds references
	// and leaves it with more is refused (see
	// references.DefaultMaxReferences).
	MaxReferencesPerObject int
	// ReferenceLease is how long a lease on a protected object lasts under
	// which the webhook admits references to it in a stream without a
	// write each (see inflight.Options.Lease); 0 takes none.
	ReferenceLease time.Duration
	// IndexPollInterval is how often the APIExports of the dependents are
	// read again (shards, grants).
	IndexPollInterval time.Duration
	// ReplayInterval is how often deferred deletions are listed again
	// without a change of the index.
	ReplayInterval time.Duration
	// RecordKeysDir is the directory of the keys that sign and verify the
	// records of deferred deletions (see records.LoadDir); empty turns
	// deferred deletion off (Replay rules deny like Deny rules).
	RecordKeysDir string
	// DeferredDeletionTTL is how long a deferred deletion is replayed; 0
	// means replay.DefaultTTL.
	DeferredDeletionTTL time.Duration
	// RelabelInterval is how often the dependents that are not labelled
	// under the current rules are looked for without a change of the
	// rules.
	RelabelInterval time.Duration
	// ClearanceInterval is how often the elected replica looks for
	// protected objects that nothing references, to clear them (see
	// package clearance); 0 turns clearances off.
	ClearanceInterval time.Duration
	// DanglingGracePeriod is how long a reference may name an object that
	// does not exist before the audit reports it (see package audit); 0
	// means audit.DefaultGracePeriod.
	DanglingGracePeriod time.Duration
	// ShardName and ShardURLs, if set, make the webhook shard-affine: it
	// reads only the virtual workspaces of the shards whose base URLs are
	// ShardURLs, answers only for workspaces on them, and elects its
	// writing replica with a lease of its own (LeaseName-ShardName).
	ShardName string
	ShardURLs []string
}

// NewOptions returns the defaults of the webhook's settings.
func NewOptions() *Options {
	return &Options{
		CommonOptions:          command.NewCommonOptions(5 * time.Minute),
		Port:                   9443,
		CertDir:                "/tmp/k8s-webhook-server/serving-certs",
		CertName:               "tls.crt",
		KeyName:                "tls.key",
		Path:                   "/validate",
		RequestTimeout:         4 * time.Second,
		MaxBlockers:            deletion.DefaultMaxBlockers,
		MaxReferencesPerObject: references.DefaultMaxReferences,
		ReferenceLease:         time.Second,
		IndexPollInterval:      10 * time.Second,
		ReplayInterval:         30 * time.Second,
		ClientCACheckInterval:  10 * time.Second,
		DeferredDeletionTTL:    replay.DefaultTTL,
		RelabelInterval:        30 * time.Second,
		ClearanceInterval:      30 * time.Second,
		DanglingGracePeriod:    audit.DefaultGracePeriod,
	}
}

// AddFlags registers the options as flags, with their current values as
// defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.CommonOptions.AddFlags(fs)
	fs.StringVar(&o.FrontProxyURL, "front-proxy-url", o.FrontProxyURL, "kcp URL through which the APIExportEndpointSlices of the dependents' APIExports are read. Default: the kubeconfig's server without its /clusters/... path.")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "Address the HTTPS server listens on; empty for all addresses.")
	fs.IntVar(&o.Port, "port", o.Port, "Port of the HTTPS server.")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "Directory with the serving certificate and key; reloaded when they change.")
	fs.StringVar(&o.CertName, "tls-cert-file", o.CertName, "File name of the serving certificate in --cert-dir.")
	fs.StringVar(&o.KeyName, "tls-key-file", o.KeyName, "File name of the serving key in --cert-dir.")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "PEM file with the CAs whose client certificates the webhook accepts (kcp's admission client certificate); re-read when it changes. Empty: any caller that reaches the port is served (isolate the port with a network policy then).")
	fs.StringSliceVar(&o.AllowedClientNames, "allowed-client-names", o.AllowedClientNames, "Common or DNS names of the client certificates accepted with --client-ca-file; empty accepts any certificate the CAs signed.")
	fs.DurationVar(&o.ClientCACheckInterval, "client-ca-check-interval", o.ClientCACheckInterval, "How often --client-ca-file is checked for changes.")
	fs.StringVar(&o.Path, "path", o.Path, "HTTP path of the validating endpoint; kcp calls <path>/<logical cluster of the provider workspace>, as the controller configures it.")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "Upper bound of the time for reading per admission request; the webhook also answers within four fifths of the timeout kcp sends with each request (--webhook-timeout-seconds of the controller).")
	fs.IntVar(&o.MaxBlockers, "max-blockers", o.MaxBlockers, "Number of blocking objects a denial names; the rest are counted.")
	fs.IntVar(&o.MaxReferencesPerObject, "max-references-per-object", o.MaxReferencesPerObject, "Most objects one dependent may reference under the rules of its type: a write that adds references and leaves it with more is refused (403), since every new reference is checked and recorded within the webhook's timeout. Raise it only with --request-timeout and the controller's --webhook-timeout-seconds, see docs/operations.md.")
	fs.DurationVar(&o.ReferenceLease, "reference-lease", o.ReferenceLease, "How long a lease lasts under which the webhook admits references to one protected object in a stream (a second reference within 2s of the last) without writing each on the object: one write stores the lease, one names the references as it ends. A DELETE of the object waits for the leases on it to end (at most this long); 0 records every reference with a write of its own. See docs/operations.md.")
	fs.DurationVar(&o.ReplayInterval, "replay-interval", o.ReplayInterval, "How often the elected replica lists deferred deletions again when nothing changed in the index; a change of the index lists them at once (at most every 2s).")
	fs.DurationVar(&o.IndexPollInterval, "index-poll-interval", o.IndexPollInterval, "How often the APIExports of dependent types are read again: shards added or removed, access granted or revoked.")
	fs.StringVar(&o.RecordKeysDir, "record-keys-dir", o.RecordKeysDir, "Directory of the keys that sign and verify the records of deferred deletions: each file is a key (at least 32 bytes), named by its file name; the greatest name signs, every key verifies; re-read every 10s (a mounted Secret). Empty: deferred deletion is off and rules with deletionPolicy Replay deny like Deny. See docs/operations.md, \"Trust boundary\".")
	fs.DurationVar(&o.DeferredDeletionTTL, "deferred-deletion-ttl", o.DeferredDeletionTTL, "How long a deferred deletion is replayed; an older record is removed, with an Event on the object, without deleting it.")
	fs.DurationVar(&o.RelabelInterval, "relabel-interval", o.RelabelInterval, "How often the elected replica looks for dependents that are not labelled under the current rules (a change of the rules looks at once).")
	fs.DurationVar(&o.ClearanceInterval, "clearance-interval", o.ClearanceInterval, "How often the elected replica lists the protected objects to clear those that nothing references, whose DELETE kcp then admits without calling the webhook; 0 turns clearances off.")
	fs.DurationVar(&o.DanglingGracePeriod, "dangling-grace-period", o.DanglingGracePeriod, "How long a reference may name an object that does not exist (creation order is free) before the elected replica reports it as dangling: on the rule (ReferencesResolved=False), in dependency_webhook_dangling_references and with a Warning Event DanglingReference on the dependent. See docs/operations.md, \"Dangling references\".")
	fs.StringVar(&o.ShardName, "shard-name", o.ShardName, "Name of the kcp shard this webhook serves, with --shard-url: it names the webhook's lease (one replica of each shard's webhook replays and marks) and its messages.")
	fs.StringSliceVar(&o.ShardURLs, "shard-url", o.ShardURLs, "Base URL of a kcp shard (as its virtual workspace URLs in APIExportEndpointSlices start, e.g. https://shard-1.kcp.example:6443); the webhook then indexes only the dependents on these shards and refuses, with 421, requests for workspaces on other shards, which must be routed to the webhook of their shard. Empty: every shard.")
}

// Validate reports every invalid option, naming its flag.
func (o *Options) Validate() error {
	errs := []error{o.CommonOptions.Validate()}
	if o.FrontProxyURL != "" {
		if u, err := url.Parse(o.FrontProxyURL); err != nil || u.Scheme != "https" || u.Host == "" || strings.Contains(u.Path, "/clusters/") {
			errs = append(errs, fmt.Errorf("--front-proxy-url %q must be an https:// URL without a /clusters/ path", o.FrontProxyURL))
		}
	}
	if o.Port < 1 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port must be between 1 and 65535, got %d", o.Port))
	}
	if o.CertDir == "" {
		errs = append(errs, errors.New("--cert-dir must not be empty"))
	}
	if len(o.AllowedClientNames) > 0 && o.ClientCAFile == "" {
		errs = append(errs, errors.New("--allowed-client-names needs --client-ca-file"))
	}
	if o.ClientCACheckInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--client-ca-check-interval must be at least 100ms, got %s", o.ClientCACheckInterval))
	}
	if !strings.HasPrefix(o.Path, "/") {
		errs = append(errs, fmt.Errorf("--path must start with /, got %q", o.Path))
	}
	if o.RequestTimeout <= 0 || o.RequestTimeout > 30*time.Second {
		errs = append(errs, fmt.Errorf("--request-timeout must be between 0 and 30s, got %s", o.RequestTimeout))
	}
	if o.MaxBlockers < 1 {
		errs = append(errs, fmt.Errorf("--max-blockers must be at least 1, got %d", o.MaxBlockers))
	}
	if o.MaxReferencesPerObject < 1 || o.MaxReferencesPerObject > maxReferencesPerObject {
		errs = append(errs, fmt.Errorf("--max-references-per-object must be between 1 and %d, got %d", maxReferencesPerObject, o.MaxReferencesPerObject))
	}
	if o.ReferenceLease < 0 || o.ReferenceLease > maxReferenceLease {
		errs = append(errs, fmt.Errorf("--reference-lease must be between 0 (off) and %s, got %s", maxReferenceLease, o.ReferenceLease))
	}
	if o.ReplayInterval < time.Second {
		errs = append(errs, fmt.Errorf("--replay-interval must be at least 1s, got %s", o.ReplayInterval))
	}
	if o.DeferredDeletionTTL < time.Minute {
		errs = append(errs, fmt.Errorf("--deferred-deletion-ttl must be at least 1m, got %s", o.DeferredDeletionTTL))
	}
	if o.RelabelInterval < time.Second {
		errs = append(errs, fmt.Errorf("--relabel-interval must be at least 1s, got %s", o.RelabelInterval))
	}
	if o.ClearanceInterval != 0 && o.ClearanceInterval < time.Second {
		errs = append(errs, fmt.Errorf("--clearance-interval must be 0 (off) or at least 1s, got %s", o.ClearanceInterval))
	}
	if o.DanglingGracePeriod < time.Second {
		errs = append(errs, fmt.Errorf("--dangling-grace-period must be at least 1s, got %s", o.DanglingGracePeriod))
	}
	if (o.ShardName == "") != (len(o.ShardURLs) == 0) {
		errs = append(errs, errors.New("--shard-name and --shard-url go together"))
	}
	if o.ShardName != "" && !validName.MatchString(o.ShardName) {
		errs = append(errs, fmt.Errorf("--shard-name %q must be a DNS label (lower case letters, digits and '-')", o.ShardName))
	}
	for _, s := range o.ShardURLs {
		if u, err := url.Parse(s); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("--shard-url %q must be an https:// URL", s))
		}
	}
	if o.IndexPollInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--index-poll-interval must be at least 100ms, got %s", o.IndexPollInterval))
	}
	return errors.Join(errs...)
}
