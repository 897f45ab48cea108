package index

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/buger/jsonparser"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// vmJSON renders one VirtualMachine shaped like kcp's responses (~700
// bytes) that references vpc.
func vmJSON(i int, vpc string) string {
	return fmt.Sprintf(`{"apiVersion":"compute.io/v1","kind":"VirtualMachine","metadata":{"annotations":{"kcp.io/cluster":"consumer","note":"created by the benchmark"},`+
		`"creationTimestamp":"2026-11-22T10:00:00Z","generation":1,"labels":{"app":"web","tier":"frontend"},"name":"vm-%06d","namespace":"default",`+
		`"resourceVersion":"%d","uid":"5f1c1a2e-0000-4000-8000-%012d"},"spec":{"cpu":4,"memory":"8Gi","image":"registry.example/os:1.2.3",`+
		`"nics":[{"name":"eth0","vpc":"%s","ip":"10.0.0.%d"},{"name":"eth1","vpc":"mgmt","ip":"10.1.0.%d"}],"vpcRef":{"name":"%s"}},`+
		`"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-11-22T10:00:00Z"}]}}`,
		i, 1000+i, i, vpc, i%250, i%250, vpc)
}

// fill adds n dependents of one namespace to the store, each referencing
// one of 50 VPCs at two paths, as the reflector would hand them over.
func fill(b *testing.B, s *shardStore, paths []fieldpath.Path, n int) {
	b.Helper()
	for i := range n {
		o, err := decodeObject([]byte(vmJSON(i, fmt.Sprintf("vpc-%d", i%50))), paths)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Add(o); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHits measures a lookup of the dependents that reference a name
// with n dependents indexed: it costs as much as the dependents it returns
// (here one), not as many as there are.
func BenchmarkHits(b *testing.B) {
	paths := []fieldpath.Path{fieldpath.MustParse(".spec.vpcRef.name"), fieldpath.MustParse(".spec.nics[*].vpc")}
	for _, n := range []int{1000, 10000, 100000} {
		ix, shard, _ := newTestIndex(paths...)
		fill(b, shard, paths, n)
		o, _ := decodeObject([]byte(vmJSON(n, "vpc-target")), paths)
		_ = shard.Add(o)
		b.Run(fmt.Sprintf("dependents=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if hits := ix.Hits(testSource, paths, "consumer", "default", "vpc-target"); len(hits) != 1 {
					b.Fatalf("%d hits", len(hits))
				}
			}
		})
	}
}

// BenchmarkIndexMemory reports the heap the store keeps per indexed
// dependent (Go heap only; the process's RSS is measured by make measure),
// for dependents that share their referenced names (50 VPCs) and for
// dependents that each reference a name of their own.
func BenchmarkIndexMemory(b *testing.B) {
	paths := []fieldpath.Path{fieldpath.MustParse(".spec.vpcRef.name"), fieldpath.MustParse(".spec.nics[*].vpc")}
	const n = 100000
	for _, tc := range []struct {
		name string
		vpc  func(i int) string
	}{
		{"shared-references", func(i int) string { return fmt.Sprintf("vpc-%d", i%50) }},
		{"unique-references", func(i int) string { return fmt.Sprintf("vpc-%06d", i) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				_, shard, _ := newTestIndex(paths...)
				for i := range n {
					o, err := decodeObject([]byte(vmJSON(i, tc.vpc(i))), paths)
					if err != nil {
						b.Fatal(err)
					}
					if err := shard.Add(o); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/dependent")
				runtime.KeepAlive(shard)
			}
		})
	}
}

// BenchmarkListDecoding compares the streaming decoder that live reads and
// the reflectors use with reading the whole response and splitting it, for
// a list of 10,000 objects (~7 MB). Streaming bounds memory by one object;
// buffering needs the whole response in memory.
func BenchmarkListDecoding(b *testing.B) {
	raw := listBody(10000, 5000)
	path := fieldpath.MustParse(".spec.vpcRef.name")
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			hits := 0
			_, err := streamList(bytes.NewReader(raw), func(item []byte) error {
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
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			all, err := io.ReadAll(bytes.NewReader(raw))
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

// listBody renders a list of n dependents in namespace default, the one at
// index hit (if any) referencing vpc-a, the others one of 50 other VPCs.
func listBody(n, hit int) []byte {
	var body bytes.Buffer
	body.WriteString(`{"apiVersion":"compute.io/v1","kind":"VirtualMachineList","metadata":{"resourceVersion":"4242"},"items":[`)
	for i := range n {
		if i > 0 {
			body.WriteByte(',')
		}
		vpc := fmt.Sprintf("vpc-%d", i%50)
		if i == hit {
			vpc = "vpc-a"
		}
		body.WriteString(vmJSON(i, vpc))
	}
	body.WriteString(`]}`)
	return body.Bytes()
}

// BenchmarkConfirm measures the live read that confirms a miss, served over
// HTTP from memory, with n dependents in the namespace, none referencing
// the object: one decision at a time, and 16 concurrent decisions in the
// same namespace, which share reads (reported as reads per decision).
func BenchmarkConfirm(b *testing.B) {
	paths := []fieldpath.Path{fieldpath.MustParse(".spec.vpcRef.name"), fieldpath.MustParse(".spec.nics[*].vpc")}
	for _, n := range []int{10, 1000, 10000} {
		body := listBody(n, -1)
		var reads atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			reads.Add(1)
			_, _ = w.Write(body)
		}))
		ix := routedIndex(b, true)
		ix.sources[testSource].urls = []string{srv.URL}
		// confirm may run on other goroutines than the benchmark's.
		confirm := func(b *testing.B, name string) {
			deps, scanned, err := ix.Confirm(context.Background(), testSource, paths, "consumer", "default", name)
			if err != nil || len(deps) != 0 || scanned != n {
				b.Error(deps, scanned, err)
			}
		}
		b.Run(fmt.Sprintf("sequential/dependents=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				confirm(b, "vpc-a")
			}
		})
		b.Run(fmt.Sprintf("16-concurrent/dependents=%d", n), func(b *testing.B) {
			reads.Store(0)
			decisions := 0
			for b.Loop() {
				var wg sync.WaitGroup
				for i := range 16 {
					wg.Go(func() { confirm(b, fmt.Sprintf("vpc-free-%d", i)) })
				}
				wg.Wait()
				decisions += 16
			}
			b.ReportMetric(float64(reads.Load())/float64(decisions), "reads/decision")
		})
		srv.Close()
	}
}
