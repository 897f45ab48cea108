package vw

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/buger/jsonparser"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
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

// matcher tells whether an item holds a value at a path, as a live read
// matches it, without allocating per item.
type matcher struct {
	path  fieldpath.Path
	value string
	found bool
	visit func(string) bool
}

func newMatcher(path fieldpath.Path, value string) *matcher {
	m := &matcher{path: path, value: value}
	m.visit = func(v string) bool {
		m.found = v == m.value
		return !m.found
	}
	return m
}

func (m *matcher) holds(b *testing.B, item []byte) bool {
	m.found = false
	if err := m.path.EachJSON(item, m.visit); err != nil {
		b.Fatal(err)
	}
	return m.found
}

// BenchmarkListDecoding compares the streaming decoder that live reads and
// the reflectors use with reading the whole response and splitting it, for
// a list of 10,000 objects (~7 MB). Streaming bounds memory by one object;
// buffering needs the whole response in memory. A live read evaluates a
// field path on each item ("stream", "buffer"); a reflector decodes what
// the store keeps of each ("stream-decode").
func BenchmarkListDecoding(b *testing.B) {
	raw := listBody(10000, 5000)
	path := fieldpathtest.MustParse(".spec.vpcRef.name").Name()
	b.Run("stream", func(b *testing.B) {
		m := newMatcher(path, "vpc-a")
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			hits := 0
			_, err := StreamList(bytes.NewReader(raw), func(item []byte) error {
				if m.holds(b, item) {
					hits++
				}
				return nil
			})
			if err != nil || hits != 1 {
				b.Fatal(err, hits)
			}
		}
	})
	b.Run("stream-decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		paths := []fieldpath.Reference{fieldpath.PathReference(path)}
		for b.Loop() {
			hits := 0
			rv, err := StreamList(bytes.NewReader(raw), func(item []byte) error {
				o, err := store.Decode(item, paths)
				if err != nil {
					return err
				}
				if slices.Contains(o.Values[0], fieldpath.Value{Name: "vpc-a"}) {
					hits++
				}
				return nil
			})
			if err != nil || hits != 1 || rv != "4242" {
				b.Fatal(err, hits, rv)
			}
		}
	})
	b.Run("buffer", func(b *testing.B) {
		m := newMatcher(path, "vpc-a")
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			all, err := io.ReadAll(bytes.NewReader(raw))
			if err != nil {
				b.Fatal(err)
			}
			hits := 0
			_, err = jsonparser.ArrayEach(all, func(item []byte, _ jsonparser.ValueType, _ int, _ error) {
				if m.holds(b, item) {
					hits++
				}
			}, "items")
			if err != nil || hits != 1 {
				b.Fatal(err, hits)
			}
		}
	})
}
