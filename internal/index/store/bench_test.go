package store

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

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

// fill adds n dependents of one namespace to the store of a shard, each
// referencing one of 50 VPCs at two paths, as the reflector would hand them
// over.
func fill(b *testing.B, s *Store, paths []fieldpath.Reference, n int) {
	b.Helper()
	shard := s.ForShard("shard-1", func() {})
	for i := range n {
		o, err := Decode([]byte(vmJSON(i, fmt.Sprintf("vpc-%d", i%50))), paths)
		if err != nil {
			b.Fatal(err)
		}
		if err := shard.Add(o); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHits measures a lookup of the dependents that reference a name
// with n dependents indexed: it costs as much as the dependents it returns
// (here one), not as many as there are.
func BenchmarkHits(b *testing.B) {
	paths := []fieldpath.Reference{vpcRef, nics}
	for _, n := range []int{1000, 10000, 100000} {
		s := New(nil)
		fill(b, s, paths, n)
		o, err := Decode([]byte(vmJSON(n, "vpc-target")), paths)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.ForShard("shard-1", func() {}).Add(o); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("dependents=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if hits := s.Referencing("consumer", []int{0, 1}, "default", "vpc-target"); len(hits) != 1 {
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
	paths := []fieldpath.Reference{vpcRef, nics}
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
				s := New(nil)
				shard := s.ForShard("shard-1", func() {})
				for i := range n {
					o, err := Decode([]byte(vmJSON(i, tc.vpc(i))), paths)
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
				if s.Len() != n {
					b.Fatalf("Len() = %d", s.Len())
				}
				runtime.KeepAlive(s)
			}
		})
	}
}

// BenchmarkUpdate measures storing one watch event of a dependent that
// changed (a new resourceVersion) with n dependents indexed: the entry is
// replaced in the reverse index, and the revision it ended is remembered
// (see RevisionID).
func BenchmarkUpdate(b *testing.B) {
	paths := []fieldpath.Reference{vpcRef, nics}
	for _, n := range []int{1000, 100000} {
		s := New(nil)
		fill(b, s, paths, n)
		shard := s.ForShard("shard-1", func() {})
		revisions := make([]*Object, 64)
		for i := range revisions {
			o, err := Decode([]byte(strings.Replace(vmJSON(0, "vpc-0"), `"resourceVersion":"1000"`, fmt.Sprintf(`"resourceVersion":"%d"`, 5000000+i), 1)), paths)
			if err != nil {
				b.Fatal(err)
			}
			revisions[i] = o
		}
		b.Run(fmt.Sprintf("dependents=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := shard.Update(revisions[i%len(revisions)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
