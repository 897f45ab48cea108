package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/buger/jsonparser"

	"github.com/opendefensecloud/dependency-controller/internal/dependents"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// listJSON renders a list of n VirtualMachines in namespace default, shaped
// like kcp's responses (~700 bytes per object); the one at index hit
// references vpc-a, the others other VPCs.
func listJSON(n, hit int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"apiVersion":"compute.io/v1","kind":"VirtualMachineList","metadata":{"resourceVersion":"4242"},"items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		vpc := fmt.Sprintf("vpc-%d", i%50)
		if i == hit {
			vpc = "vpc-a"
		}
		fmt.Fprintf(&b, `{"apiVersion":"compute.io/v1","kind":"VirtualMachine","metadata":{"annotations":{"kcp.io/cluster":"consumer","note":"created by the benchmark"},`+
			`"creationTimestamp":"2026-11-22T10:00:00Z","generation":1,"labels":{"app":"web","tier":"frontend"},"name":"vm-%05d","namespace":"default",`+
			`"resourceVersion":"%d","uid":"5f1c1a2e-0000-4000-8000-%012d"},"spec":{"cpu":4,"memory":"8Gi","image":"registry.example/os:1.2.3",`+
			`"nics":[{"name":"eth0","vpc":"%s","ip":"10.0.0.%d"},{"name":"eth1","vpc":"mgmt","ip":"10.1.0.%d"}],"vpcRef":{"name":"%s"}},`+
			`"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-11-22T10:00:00Z"}]}}`,
			i, 1000+i, i, vpc, i%250, i%250, vpc)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func BenchmarkValidator(b *testing.B) {
	rules := staticRules{vpcs.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name", ".spec.nics[*].vpc")}}
	for _, n := range []int{10, 1000, 10000} {
		body := listJSON(n, n/2)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		}))
		v := NewDeletionValidator(rules, openGate(true), dependents.NewHTTPLister(srv.URL, srv.Client()))
		req := deleteRequest(vpcs, "consumer", "default", "vpc-a", nil)

		b.Run(fmt.Sprintf("dependents=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if resp := v.Handle(context.Background(), req); resp.Allowed {
					b.Fatal("allowed")
				}
			}
		})
		srv.Close()
	}
}

// BenchmarkListDecoding compares the streaming decoder the lister uses with
// reading the whole response and splitting it with jsonparser, for a list
// of 10,000 objects (~7 MB). Streaming bounds memory by one object;
// buffering needs the whole response in memory.
func BenchmarkListDecoding(b *testing.B) {
	body := listJSON(10000, 5000)
	path := pathOf(b, ".spec.vpcRef.name")
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			hits := 0
			err := dependents.StreamItems(bytes.NewReader(body), func(item []byte) error {
				if ok, _ := path.ContainsJSON(item, "vpc-a"); ok {
					hits++
				}
				return nil
			})
			if err != nil || hits != 1 {
				b.Fatal(err, hits)
			}
		}
	})
	b.Run("buffer", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			all, err := io.ReadAll(bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			hits := 0
			_, err = jsonparser.ArrayEach(all, func(item []byte, _ jsonparser.ValueType, _ int, _ error) {
				if ok, _ := path.ContainsJSON(item, "vpc-a"); ok {
					hits++
				}
			}, "items")
			if err != nil || hits != 1 {
				b.Fatal(err, hits)
			}
		}
	})
}

func pathOf(b *testing.B, s string) interface {
	ContainsJSON([]byte, string) (bool, error)
} {
	b.Helper()
	return entry("x", schema.GroupVersionResource{}, "X", s).Paths[0]
}
