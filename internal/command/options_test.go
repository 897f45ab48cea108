package command

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestCommonOptionsFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    CommonOptions
		wantErr []string
	}{
		{
			name: "defaults",
			want: CommonOptions{APIExportName: DefaultAPIExportName, MetricsBindAddress: ":8080", HealthProbeBindAddress: ":8081", ResyncPeriod: 7 * time.Minute, LeaderElect: true, LeaderElectionNamespace: "default"},
		},
		{
			name: "every flag",
			args: []string{"--api-export-name=deps.example.io", "--metrics-bind-address=0", "--health-probe-bind-address=:9000", "--resync-period=30s", "--leader-elect=false", "--leader-election-namespace=leases"},
			want: CommonOptions{APIExportName: "deps.example.io", MetricsBindAddress: "0", HealthProbeBindAddress: ":9000", ResyncPeriod: 30 * time.Second, LeaderElectionNamespace: "leases"},
		},
		{
			name:    "every invalid option is reported, naming its flag",
			args:    []string{"--api-export-name=", "--resync-period=10ms"},
			want:    CommonOptions{MetricsBindAddress: ":8080", HealthProbeBindAddress: ":8081", ResyncPeriod: 10 * time.Millisecond, LeaderElect: true, LeaderElectionNamespace: "default"},
			wantErr: []string{"--api-export-name must not be empty", "--resync-period must be at least 1s, got 10ms"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewCommonOptions(7 * time.Minute)
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if o != tt.want {
				t.Errorf("options = %+v, want %+v", o, tt.want)
			}
			err := o.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Errorf("Validate() = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestCommonOptionsManagerOptions(t *testing.T) {
	o := NewCommonOptions(time.Minute)
	o.MetricsBindAddress, o.HealthProbeBindAddress = "0", ":9001"
	got := o.ManagerOptions()
	if got.Metrics.BindAddress != "0" || got.HealthProbeBindAddress != ":9001" {
		t.Errorf("ManagerOptions() = metrics %q, health %q", got.Metrics.BindAddress, got.HealthProbeBindAddress)
	}
}
