package controllerserver

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

func TestOptions(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		check   func(t *testing.T, o *Options)
		wantErr []string
	}{
		{
			name: "defaults with the required URL",
			args: []string{"--webhook-url=https://webhook.example:9443/validate"},
			check: func(t *testing.T, o *Options) {
				c, m := o, o.ManagerOptions()
				if c.APIExportName != "dependencies.opendefense.cloud" || c.ResyncPeriod != 10*time.Minute || c.WebhookTimeoutSeconds != 5 ||
					c.FailurePolicy != admissionregistrationv1.Fail || c.WebhookCABundleFile != "" || c.CABundleCheckInterval != 10*time.Second ||
					c.WebhookUser != "dependency-webhook" {
					t.Errorf("controller options = %+v", c)
				}
				if !m.LeaderElection || m.LeaderElectionNamespace != "default" || m.Metrics.BindAddress != ":8080" || m.HealthProbeBindAddress != ":8081" {
					t.Errorf("manager options: leader election %v in %q, metrics %q, health %q", m.LeaderElection, m.LeaderElectionNamespace, m.Metrics.BindAddress, m.HealthProbeBindAddress)
				}
			},
		},
		{
			name: "every flag, the common ones included",
			args: []string{
				"--api-export-name=deps.example.io", "--metrics-bind-address=0", "--health-probe-bind-address=:9000", "--resync-period=1m",
				"--webhook-url=https://webhook.example/validate", "--webhook-ca-bundle=/ca/ca.crt", "--webhook-timeout-seconds=10",
				"--failure-policy=Ignore", "--leader-elect=false", "--leader-election-namespace=kcp", "--webhook-ca-bundle-check-interval=1s",
				"--webhook-user=oidc:deps",
			},
			check: func(t *testing.T, o *Options) {
				c, m := o, o.ManagerOptions()
				if c.APIExportName != "deps.example.io" || c.ResyncPeriod != time.Minute || c.WebhookURL != "https://webhook.example/validate" ||
					c.WebhookCABundleFile != "/ca/ca.crt" || c.WebhookTimeoutSeconds != 10 || c.FailurePolicy != admissionregistrationv1.Ignore ||
					c.CABundleCheckInterval != time.Second || c.WebhookUser != "oidc:deps" {
					t.Errorf("controller options = %+v", c)
				}
				if m.LeaderElection || m.LeaderElectionNamespace != "kcp" || m.Metrics.BindAddress != "0" || m.HealthProbeBindAddress != ":9000" {
					t.Errorf("manager options: leader election %v in %q, metrics %q, health %q", m.LeaderElection, m.LeaderElectionNamespace, m.Metrics.BindAddress, m.HealthProbeBindAddress)
				}
			},
		},
		{
			name: "every invalid option is reported, the common ones included",
			args: []string{"--api-export-name=", "--resync-period=0s", "--webhook-url=http://webhook/validate", "--webhook-timeout-seconds=31",
				"--failure-policy=Maybe", "--webhook-ca-bundle-check-interval=1ms", "--webhook-user= deps"},
			wantErr: []string{"--api-export-name", "--resync-period", "--webhook-url", "--webhook-timeout-seconds", "--failure-policy", "--webhook-ca-bundle-check-interval", "--webhook-user"},
		},
		{
			name:    "the webhook's user is no service account",
			args:    []string{"--webhook-url=https://webhook.example/validate", "--webhook-user=system:serviceaccount:kcp:dependency-webhook"},
			wantErr: []string{"--webhook-user", "names a service account"},
		},
		{
			name: "no webhook user: the guard reviews the webhook's writes too",
			args: []string{"--webhook-url=https://webhook.example/validate", "--webhook-user="},
			check: func(t *testing.T, o *Options) {
				if o.WebhookUser != "" {
					t.Errorf("WebhookUser = %q, want empty", o.WebhookUser)
				}
			},
		},
		{
			name:    "the webhook URL is required",
			wantErr: []string{"--webhook-url is required"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				tt.check(t, o)
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors naming %v", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %q, want it to name %q", err, want)
				}
			}
		})
	}
}
