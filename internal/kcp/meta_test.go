package kcp

import (
	"strings"
	"testing"
)

func TestReadMeta(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want Meta
		// err, if set, is part of the error ReadMeta must return.
		err string
	}{
		{
			name: "every field it reads, and nothing else",
			raw: `{"apiVersion":"compute.io/v1","kind":"VirtualMachine","metadata":{"name":"vm-1","namespace":"default","uid":"u-1",
				"resourceVersion":"42","deletionTimestamp":"2026-01-01T00:00:00Z","labels":{"name":"not-the-name"},
				"annotations":{"kcp.io/cluster":"c1","dependencies.opendefense.cloud/skip-protection":"true","other":"x"},
				"managedFields":[{"manager":"m"}]},"spec":{"name":"not-the-name-either","metadata":{"name":"nor-this"}}}`,
			want: Meta{Cluster: "c1", Namespace: "default", Name: "vm-1", UID: "u-1", ResourceVersion: "42", Terminating: true, SkipProtection: true},
		},
		{
			name: "metadata after the spec",
			raw:  `{"spec":{"metadata":{"name":"nested"}},"metadata":{"name":"vm-1"}}`,
			want: Meta{Name: "vm-1"},
		},
		{
			name: "a cluster-scoped object without annotations",
			raw:  `{"metadata":{"name":"gateway","uid":"u-2"}}`,
			want: Meta{Name: "gateway", UID: "u-2"},
		},
		{
			name: "a CREATE that asks the server for a name",
			raw:  `{"metadata":{"generateName":"vm-","namespace":"default"}}`,
			want: Meta{Namespace: "default", GenerateName: "vm-"},
		},
		{
			name: "null fields are absent ones",
			raw: `{"metadata":{"name":null,"namespace":null,"generateName":null,"uid":null,"resourceVersion":null,
				"deletionTimestamp":null,"annotations":{"kcp.io/cluster":null,"dependencies.opendefense.cloud/skip-protection":null}}}`,
			want: Meta{},
		},
		{
			name: "null annotations",
			raw:  `{"metadata":{"name":"vm-1","annotations":null}}`,
			want: Meta{Name: "vm-1"},
		},
		{
			name: "skip-protection false",
			raw:  `{"metadata":{"name":"vm-1","annotations":{"dependencies.opendefense.cloud/skip-protection":"false"}}}`,
			want: Meta{Name: "vm-1"},
		},
		{
			name: "skip-protection only with the value true",
			raw:  `{"metadata":{"name":"vm-1","annotations":{"dependencies.opendefense.cloud/skip-protection":"True"}}}`,
			want: Meta{Name: "vm-1"},
		},
		{
			name: "skip-protection empty",
			raw:  `{"metadata":{"name":"vm-1","annotations":{"dependencies.opendefense.cloud/skip-protection":""}}}`,
			want: Meta{Name: "vm-1"},
		},
		{
			name: "skip-protection and the record of who set it",
			raw: `{"metadata":{"name":"vm-1","annotations":{"dependencies.opendefense.cloud/skip-protection":"true",
				"dependencies.opendefense.cloud/skip-protection-set-by":"{\"user\":\"admin\"}"}}}`,
			want: Meta{Name: "vm-1", SkipProtection: true, SkipProtectionSetBy: `{"user":"admin"}`},
		},
		{
			name: "null labels",
			raw:  `{"metadata":{"name":"vm-1","labels":null,"annotations":{"dependencies.opendefense.cloud/skip-protection-set-by":null}}}`,
			want: Meta{Name: "vm-1"},
		},
		{
			name: "escaped strings are decoded",
			raw:  `{"metadata":{"name":"vm-\u00e9\n","namespace":"a\/b"}}`,
			want: Meta{Name: "vm-é\n", Namespace: "a/b"},
		},
		{
			name: "deletion requested label and its record",
			raw: `{"metadata":{"name":"vpc-1","labels":{"deletion.dependencies.opendefense.cloud/requested":""},
				"annotations":{"deletion.dependencies.opendefense.cloud/request":"{\"user\":\"alice\"}"}}}`,
			want: Meta{Name: "vpc-1", DeletionRequested: true, DeletionRecord: `{"user":"alice"}`},
		},
		{
			name: "the label's key as an annotation, and the record's as a label, mean nothing",
			raw: `{"metadata":{"name":"vpc-1","annotations":{"deletion.dependencies.opendefense.cloud/requested":"true"},
				"labels":{"deletion.dependencies.opendefense.cloud/request":"x"}}}`,
			want: Meta{Name: "vpc-1"},
		},
		{
			name: "the admission label",
			raw:  `{"metadata":{"name":"vm-1","labels":{"dependencies.opendefense.cloud/admission":"0123456789abcdef"}}}`,
			want: Meta{Name: "vm-1", Admission: "0123456789abcdef"},
		},
		{
			name: "the admission label's key as an annotation means nothing",
			raw:  `{"metadata":{"name":"vm-1","annotations":{"dependencies.opendefense.cloud/admission":"0123456789abcdef"}}}`,
			want: Meta{Name: "vm-1"},
		},
		{
			name: "a bookmark carries only a resourceVersion",
			raw:  `{"kind":"VirtualMachine","metadata":{"resourceVersion":"77"}}`,
			want: Meta{ResourceVersion: "77"},
		},
		{name: "a name that is a number", raw: `{"metadata":{"name":1}}`, err: "not a string"},
		{name: "a namespace that is an object", raw: `{"metadata":{"name":"vm-1","namespace":{}}}`, err: "not a string"},
		{name: "a uid that is a list", raw: `{"metadata":{"uid":["u"]}}`, err: "not a string"},
		{name: "a deletionTimestamp that is a number", raw: `{"metadata":{"deletionTimestamp":0}}`, err: "not a string"},
		{name: "a cluster annotation that is a boolean", raw: `{"metadata":{"annotations":{"kcp.io/cluster":true}}}`, err: "not a string"},
		{name: "skip-protection as a boolean", raw: `{"metadata":{"annotations":{"dependencies.opendefense.cloud/skip-protection":true}}}`, err: "not a string"},
		{name: "an admission label that is a number", raw: `{"metadata":{"labels":{"dependencies.opendefense.cloud/admission":7}}}`, err: "not a string"},
		{name: "a malformed escape", raw: `{"metadata":{"name":"a\q"}}`, err: "name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadMeta([]byte(tt.raw))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ReadMeta() = %+v, %v; want an error about %q", got, err, tt.err)
				}
				if got != (Meta{}) {
					t.Errorf("ReadMeta() returned %+v with its error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadMeta() error = %v", err)
			}
			if got != tt.want {
				t.Errorf("ReadMeta() =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}

// An error names the field that is not a string, so that a malformed object
// can be found.
func TestReadMetaNamesTheField(t *testing.T) {
	_, err := ReadMeta([]byte(`{"metadata":{"name":"vm-1","annotations":{"kcp.io/cluster":7}}}`))
	if err == nil || !strings.Contains(err.Error(), "kcp.io/cluster") || !strings.Contains(err.Error(), "number") {
		t.Errorf("ReadMeta() error = %v, want it to name the annotation and its type", err)
	}
}
