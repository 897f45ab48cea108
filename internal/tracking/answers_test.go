package tracking

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

func secrets(keys ...string) func() [][]byte {
	return func() [][]byte {
		var s [][]byte
		for _, k := range keys {
			s = append(s, []byte(k))
		}
		return s
	}
}

func TestAnswers(t *testing.T) {
	signed := NewAnswers(secrets("new", "old"))
	tests := []struct {
		name    string
		answers *Answers
		kind    Kind
		value   string
		scheme  string
		answer  string
		want    bool
	}{
		{"signed with the signing key", signed, KindGuard, "probe-a", "", NewAnswers(secrets("new")).Sign(KindGuard, "probe-a", ""), true},
		{"signed with another key of the ring (keys rotating)", signed, KindGuard, "probe-a", "", NewAnswers(secrets("old")).Sign(KindGuard, "probe-a", ""), true},
		{"signed with a key not in the ring", signed, KindGuard, "probe-a", "", NewAnswers(secrets("other")).Sign(KindGuard, "probe-a", ""), false},
		{"no answer", signed, KindGuard, "probe-a", "", "", false},
		{"the answer to another probe", signed, KindGuard, "probe-a", "", signed.Sign(KindGuard, "probe-b", ""), false},
		{"the answer of another webhook", signed, KindGuard, "probe-a", "", signed.Sign(KindLabelling, "probe-a", ""), false},
		{"the answer for another scheme", signed, KindLabelling, "probe-a", "s1", signed.Sign(KindLabelling, "probe-a", "s0"), false},
		{"the answer for the scheme", signed, KindLabelling, "probe-a", "s1", signed.Sign(KindLabelling, "probe-a", "s1"), true},
		{"unsigned: anything", NewAnswers(secrets()), KindGuard, "probe-a", "", "", true},
		{"nil: anything", nil, KindCheck, "dependency-probe-a", "", "x", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.answers.Valid(tt.kind, tt.value, tt.scheme, tt.answer); got != tt.want {
				t.Errorf("Valid = %v, want %v", got, tt.want)
			}
		})
	}
	if got := NewAnswers(secrets()).Sign(KindGuard, "probe-a", ""); got != "" {
		t.Errorf("unsigned answers sign %q", got)
	}
	if got := (*Answers)(nil).Sign(KindGuard, "probe-a", ""); got != "" {
		t.Errorf("nil answers sign %q", got)
	}
	if got := signed.Sign(KindGuard, "probe-a", ""); len(got) != answerLength || strings.Trim(got, "0123456789abcdef") != "" {
		t.Errorf("answer %q is not %d hex digits", got, answerLength)
	}
}

func TestCheckProbeAnswered(t *testing.T) {
	name := CheckProbePrefix + "abcdefgh"
	tests := []struct {
		name       string
		msg        string
		wantAnswer string
		want       bool
	}{
		{"signed, as kcp wraps it", `admission webhook "references.dependencies.opendefense.cloud" denied the request: ` + CheckProbeAnswer(name, "0123abcd"), "0123abcd", true},
		{"unsigned", CheckProbeAnswer(name, ""), "", true},
		{"the refusal of another probe", CheckProbeAnswer(CheckProbePrefix+"zzzzzzzz", "0123abcd"), "", false},
		{"another refusal", "denied: " + name, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer, ok := checkProbeAnswered(tt.msg, name)
			if answer != tt.wantAnswer || ok != tt.want {
				t.Errorf("checkProbeAnswered = %q, %v; want %q, %v", answer, ok, tt.wantAnswer, tt.want)
			}
		})
	}
}

// TestTrackerVerifiesAnswers: a webhook that behaves as the product's but
// cannot sign its answers (another admission webhook in its place) shows
// no webhook in effect; so does an answer to another probe.
func TestTrackerVerifiesAnswers(t *testing.T) {
	spec, err := fieldpath.ParseReference(fieldpath.ReferenceSpec{Path: ".spec.vpcRef.name"})
	if err != nil {
		t.Fatal(err)
	}
	webhook := NewAnswers(secrets("key-2"))
	tracker := NewAnswers(secrets("key-2", "key-1"))
	keys := []struct {
		key     Key
		vouches string
	}{
		{Key{Kind: KindLabelling, Source: vms, Shard: "https://shard-1/vw", Scheme: "s1"}, "s1"},
		{Key{Kind: KindGuard, Source: vpcs, Shard: "https://shard-1/vw"}, ""},
		{Key{Kind: KindCheck, Source: vms, Shard: "https://shard-1/vw", Scheme: CheckScheme([]fieldpath.Reference{spec})}, ""},
	}
	tests := []struct {
		name   string
		answer func(kind Kind, value, scheme string) string
		want   bool
	}{
		{"signed", webhook.Sign, true},
		{"signed with the key before", NewAnswers(secrets("key-1")).Sign, true},
		{"not signed", nil, false},
		{"signed with another key", NewAnswers(secrets("key-3")).Sign, false},
		{"the answer to an earlier probe", func(kind Kind, _, scheme string) string {
			return webhook.Sign(kind, ProbeValuePrefix+"earlier", scheme)
		}, false},
	}
	for _, k := range keys {
		for _, tt := range tests {
			t.Run(string(k.key.Kind)+": "+tt.name, func(t *testing.T) {
				p := &fakeProber{answer: tt.answer, vouches: k.vouches, checked: map[string]bool{"spec": true}}
				p.set("s1", true, nil)
				tr := New(p, Options{Answers: tracker})
				got, err := tr.check(context.Background(), k.key, Object{Name: "vm-1", References: []fieldpath.Reference{spec}})
				if err != nil || got != tt.want {
					t.Errorf("check = %v, %v; want %v", got, err, tt.want)
				}
			})
		}
	}
	t.Run("labelling: the answer for another scheme", func(t *testing.T) {
		p := &fakeProber{answer: webhook.Sign, vouches: "s0"}
		p.set("s1", false, nil)
		tr := New(p, Options{Answers: tracker})
		if got, err := tr.check(context.Background(), keys[0].key, Object{Name: "vm-1"}); err != nil || got {
			t.Errorf("check = %v, %v; want false", got, err)
		}
	})
	t.Run("check: a refusal without the check's answer still tells nothing", func(t *testing.T) {
		p := &fakeProber{refuseAll: apierrors.NewForbidden(schema.GroupResource{Resource: "virtualmachines"}, "vm-1", errors.New("denied"))}
		tr := New(p, Options{Answers: tracker})
		if _, err := tr.check(context.Background(), keys[2].key, Object{Name: "vm-1", References: []fieldpath.Reference{spec}}); err == nil {
			t.Error("a refusal that is no answer told")
		}
	})
}
