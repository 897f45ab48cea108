package webhookserver

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// The checks of the shard flags and of --dangling-grace-period.
func TestFlagChecks(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{args: nil},
		{args: []string{"--shard-name=shard-1", "--shard-url=https://shard-1.kcp:6443"}},
		{args: []string{"--shard-name=two", "--shard-url=https://a:6443,https://b:6443"}},
		{args: []string{"--shard-name=shard-1"}, wantErr: "--shard-name and --shard-url go together"},
		{args: []string{"--shard-url=https://shard-1.kcp:6443"}, wantErr: "--shard-name and --shard-url go together"},
		{args: []string{"--shard-name=Shard_1", "--shard-url=https://shard-1.kcp:6443"}, wantErr: "must be a DNS label"},
		{args: []string{"--shard-name=shard-1", "--shard-url=http://shard-1.kcp:6443"}, wantErr: "must be an https:// URL"},
		{args: []string{"--dangling-grace-period=30s"}},
		{args: []string{"--dangling-grace-period=0s"}, wantErr: "--dangling-grace-period must be at least 1s"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			o := NewOptions()
			if o.DanglingGracePeriod != 5*time.Minute {
				t.Errorf("the default --dangling-grace-period is %s, want 5m", o.DanglingGracePeriod)
			}
			fs := pflag.NewFlagSet("webhook", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestMaxReferencesFlag(t *testing.T) {
	tests := []struct {
		args    []string
		want    int
		wantErr string
	}{
		{args: nil, want: 256},
		{args: []string{"--max-references-per-object=3000"}, want: 3000},
		{args: []string{"--max-references-per-object=0"}, wantErr: "--max-references-per-object must be between 1 and 10000, got 0"},
		{args: []string{"--max-references-per-object=10001"}, wantErr: "--max-references-per-object must be between 1 and 10000"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("webhook", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			if tt.wantErr == "" && (err != nil || o.MaxReferencesPerObject != tt.want) || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Validate() = %v with %d, want %q with %d", err, o.MaxReferencesPerObject, tt.wantErr, tt.want)
			}
		})
	}
}
