package fieldpath

import (
	"bytes"
	"encoding/json"
	"testing"
)

// benchObject is k8sObject as the API server sends it: without indentation.
func benchObject(b *testing.B) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(k8sObject)); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

var benchPaths = []struct {
	name, path, want string
}{
	{"plain", ".spec.vpcRef.name", "vpc-a"},
	{"wildcard", ".spec.nics[*].vpcRef.name", "vpc-b"},
	{"miss", ".spec.nics[*].vpcRef.name", "vpc-c"},
}

func BenchmarkContainsJSON(b *testing.B) {
	data := benchObject(b)
	b.Logf("object size: %d bytes", len(data))
	for _, bb := range benchPaths {
		b.Run(bb.name, func(b *testing.B) {
			p := MustParse(bb.path)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if ok, err := p.ContainsJSON(data, bb.want); err != nil || ok != (bb.name != "miss") {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

func BenchmarkResolveUnstructured(b *testing.B) {
	data := benchObject(b)
	for _, bb := range benchPaths {
		b.Run(bb.name, func(b *testing.B) {
			p := MustParse(bb.path)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				var obj map[string]any
				if err := json.Unmarshal(data, &obj); err != nil {
					b.Fatal(err)
				}
				if len(p.Resolve(obj)) == 0 {
					b.Fatal("no values")
				}
			}
		})
	}
}
