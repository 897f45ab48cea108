package kcpversion

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"k8s.io/client-go/rest"
)

func TestParse(t *testing.T) {
	tests := []struct {
		gitVersion string
		wantKCP    string
		wantTested bool
	}{
		{"v1.35.1+kcp-v0.31.2", "v0.31.2", true},
		{"v1.35.1+kcp-v0.31.5", "v0.31.5", true},
		{"v1.35.1+kcp-v0.31.2-rc.1", "v0.31.2-rc.1", true},
		{"v1.35.1+kcp-v0.31.1", "v0.31.1", false},
		{"v1.35.1+kcp-v0.30.0", "v0.30.0", false},
		{"v1.36.0+kcp-v0.32.3", "v0.32.3", false},
		{"v1.35.1+kcp-v1.31.2", "v1.31.2", false},
		{"v1.35.1", "", false},
		{"v1.35.1+kcp-", "", false},
		{"v1.35.1+kcp-main", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.gitVersion, func(t *testing.T) {
			got := Parse(tt.gitVersion)
			if got.GitVersion != tt.gitVersion || got.KCP != tt.wantKCP || got.Tested != tt.wantTested {
				t.Errorf("Parse(%q) = %+v, want KCP %q, Tested %v", tt.gitVersion, got, tt.wantKCP, tt.wantTested)
			}
		})
	}
	if !Parse("v1.35.1+kcp-" + Tested).Tested {
		t.Errorf("the tested version %s is not in the tested range", Tested)
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		info Info
		want []string
	}{
		{Info{}, []string{"could not be read"}},
		{Parse("v1.35.1"), []string{`"v1.35.1"`, "names no kcp release", Tested}},
		{Parse("v1.35.1+kcp-v0.31.2"), []string{"kcp v0.31.2 is in the tested range", TestedRange}},
		{Parse("v1.36.0+kcp-v0.32.3"), []string{"kcp v0.32.3 is outside the tested range", TestedRange, "contract suite", "Compatibility"}},
	}
	for _, tt := range tests {
		got := tt.info.Describe()
		for _, part := range tt.want {
			if !strings.Contains(got, part) {
				t.Errorf("%+v: Describe() = %q, missing %q", tt.info, got, part)
			}
		}
	}
}

func TestNewMetric(t *testing.T) {
	tests := []struct {
		info Info
		want string
	}{
		{Parse("v1.35.1+kcp-v0.31.2"), `{tested="true",version="v0.31.2"} 1`},
		{Parse("v1.36.0+kcp-v0.32.3"), `{tested="false",version="v0.32.3"} 1`},
		{Info{}, `{tested="unknown",version="unknown"} 1`},
	}
	for _, tt := range tests {
		for name, metric := range map[string]func(Info) prometheus.Collector{
			"dependency_controller_kcp_version_info": ControllerMetric,
			"dependency_webhook_kcp_version_info":    WebhookMetric,
		} {
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(metric(tt.info)); err != nil {
				t.Fatal(err)
			}
			want := "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + tt.want + "\n"
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), name); err != nil {
				t.Errorf("%+v: %v", tt.info, err)
			}
		}
	}
}

// Read asks the server under the workspace path of the config, as a
// kubeconfig of the binaries points at a workspace.
func TestRead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/clusters/root:dep-ctrl/version" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"35","gitVersion":"v1.35.1+kcp-v0.31.2"}`))
	}))
	defer srv.Close()

	got, err := Read(&rest.Config{Host: srv.URL + "/clusters/root:dep-ctrl"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got.KCP != "v0.31.2" || !got.Tested {
		t.Errorf("Read() = %+v, want v0.31.2, tested", got)
	}
	if _, err := Read(&rest.Config{Host: srv.URL + "/clusters/root:other"}, time.Second); err == nil {
		t.Error("Read() of a server without /version succeeded")
	}
}
