package webhookserver

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestShardFlags(t *testing.T) {
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
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
