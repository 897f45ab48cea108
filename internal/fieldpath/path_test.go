package fieldpath

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

var patternRE = regexp.MustCompile(Pattern)

// matchesPattern reports whether s is accepted by the CRD validation, that is
// by Pattern and MaxLength.
func matchesPattern(s string) bool {
	return len(s) <= MaxLength && patternRE.MatchString(s)
}

var longName = strings.Repeat("a", MaxLength-1)

var parseTests = []struct {
	name    string
	in      string
	want    string // canonical form
	wantErr string
}{
	// Valid paths.
	{name: "leading dot", in: ".spec.vpcRef.name", want: ".spec.vpcRef.name"},
	{name: "no leading dot", in: "spec.vpcRef.name", want: ".spec.vpcRef.name"},
	{name: "single name", in: "spec", want: ".spec"},
	{name: "single name with dot", in: ".spec", want: ".spec"},
	{name: "single character", in: "a", want: ".a"},
	{name: "wildcard in the middle", in: ".spec.nics[*].vpcRef.name", want: ".spec.nics[*].vpcRef.name"},
	{name: "trailing wildcard", in: ".spec.vpcNames[*]", want: ".spec.vpcNames[*]"},
	{name: "nested wildcards", in: ".spec.matrix[*][*].ref", want: ".spec.matrix[*][*].ref"},
	{name: "wildcard on first segment", in: "items[*].name", want: ".items[*].name"},
	{name: "all name characters", in: ".aZ09_-.-_.0.Z", want: ".aZ09_-.-_.0.Z"},
	{name: "maximum length with dot", in: "." + longName, want: "." + longName},
	{name: "maximum length without dot", in: longName + "a", want: "." + longName + "a"},

	// Invalid paths.
	{name: "empty", in: "", wantErr: `invalid field path "": path is empty`},
	{name: "only dot", in: ".", wantErr: `invalid field path ".": path has no field names`},
	{name: "too long", in: "." + longName + "a", wantErr: `length 257 exceeds the maximum of 256 bytes`},
	{name: "too long without dot", in: longName + "aa", wantErr: `length 257 exceeds the maximum of 256 bytes`},
	{name: "leading double dot", in: "..spec", wantErr: `invalid field path "..spec": empty field name at offset 1`},
	{name: "double dot", in: ".spec..name", wantErr: `invalid field path ".spec..name": empty field name at offset 6`},
	{name: "trailing dot", in: ".spec.", wantErr: `invalid field path ".spec.": trailing '.' at offset 5`},
	{name: "trailing dot without leading dot", in: "spec.", wantErr: `invalid field path "spec.": trailing '.' at offset 4`},
	{name: "trailing dot after wildcard", in: "a[*].", wantErr: `invalid field path "a[*].": trailing '.' at offset 4`},
	{name: "wildcard first", in: "[*].a", wantErr: `invalid field path "[*].a": "[*]" at offset 0 must follow a field name`},
	{name: "wildcard after leading dot", in: ".[*]", wantErr: `invalid field path ".[*]": "[*]" at offset 1 must follow a field name`},
	{name: "wildcard after dot", in: ".a.[*]", wantErr: `invalid field path ".a.[*]": "[*]" at offset 3 must follow a field name`},
	{name: "unterminated bracket", in: ".a[", wantErr: `invalid field path ".a[": unterminated '[' at offset 2`},
	{name: "unterminated wildcard", in: ".a[*", wantErr: `invalid field path ".a[*": unterminated '[' at offset 2`},
	{name: "unterminated wildcard before dot", in: ".a[*.b", wantErr: `invalid field path ".a[*.b": unterminated '[' at offset 2`},
	{name: "index", in: ".spec.nics[0].name", wantErr: `invalid field path ".spec.nics[0].name": unsupported subscript "[0]" at offset 10: only "[*]" is allowed`},
	{name: "empty subscript", in: ".a[]", wantErr: `invalid field path ".a[]": unsupported subscript "[]" at offset 2: only "[*]" is allowed`},
	{name: "key subscript", in: ".a[b].c", wantErr: `invalid field path ".a[b].c": unsupported subscript "[b]" at offset 2: only "[*]" is allowed`},
	{name: "second subscript", in: ".a[*][1]", wantErr: `invalid field path ".a[*][1]": unsupported subscript "[1]" at offset 5: only "[*]" is allowed`},
	{name: "name after wildcard", in: ".a[*]b", wantErr: `invalid field path ".a[*]b": missing '.' before field name at offset 5`},
	{name: "stray closing bracket", in: ".a]", wantErr: `invalid field path ".a]": invalid character "]" at offset 2: field names may only contain ASCII letters, digits, '_' and '-'`},
	{name: "star", in: ".a.*", wantErr: `invalid field path ".a.*": invalid character "*" at offset 3: field names may only contain ASCII letters, digits, '_' and '-'`},
	{name: "space inside", in: ".spec. name", wantErr: `invalid field path ".spec. name": invalid character " " at offset 6`},
	{name: "leading space", in: " .spec", wantErr: `invalid field path " .spec": invalid character " " at offset 0`},
	{name: "trailing space", in: ".spec ", wantErr: `invalid field path ".spec ": invalid character " " at offset 5`},
	{name: "trailing newline", in: ".spec\n", wantErr: `invalid field path ".spec\n": invalid character "\n" at offset 5`},
	{name: "slash", in: "metadata/name", wantErr: `invalid character "/" at offset 8`},
	{name: "unicode", in: ".spéc", wantErr: `invalid field path ".spéc": invalid character "é" at offset 3`},
	{name: "invalid UTF-8", in: ".a\xff\x80", wantErr: `invalid field path ".a\xff\x80": invalid character "\xff" at offset 2`},
	{name: "NUL", in: ".a\x00", wantErr: `invalid character "\x00" at offset 2`},
	{name: "quoted name", in: `.metadata."name"`, wantErr: `invalid character "\"" at offset 10`},
	{name: "JSONPath root", in: "$.spec", wantErr: `invalid character "$" at offset 0`},
}

func TestParse(t *testing.T) {
	for _, tt := range parseTests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := matchesPattern(tt.in), tt.wantErr == ""; got != want {
				t.Errorf("Pattern and MaxLength accept %q: %v, want %v", tt.in, got, want)
			}

			p, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse(%q) = %q, want error containing %q", tt.in, p, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Parse(%q) error = %q, want it to contain %q", tt.in, err, tt.wantErr)
				}
				if p != (Path{}) {
					t.Errorf("Parse(%q) returned %q with an error, want the zero Path", tt.in, p)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q) unexpected error: %v", tt.in, err)
			}
			if got := p.String(); got != tt.want {
				t.Errorf("Parse(%q).String() = %q, want %q", tt.in, got, tt.want)
			}
			checkReparse(t, p)
		})
	}
}

// checkReparse checks that the canonical form of p parses to p, unless it is
// too long, which is expected only for MaxLength-byte paths without a leading
// dot.
func checkReparse(t *testing.T, p Path) {
	t.Helper()
	again, err := Parse(p.String())
	if len(p.String()) > MaxLength {
		if len(p.String()) != MaxLength+1 || err == nil {
			t.Errorf("canonical form %q is %d bytes long and Parse returned error %v", p, len(p.String()), err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Parse(%q) of the canonical form unexpected error: %v", p, err)
	}
	if again != p {
		t.Errorf("Parse(%q) = %q, want %q", p, again, p)
	}
}

func TestParseEquivalentPaths(t *testing.T) {
	if a, b := MustParse("spec.nics[*].name"), MustParse(".spec.nics[*].name"); a != b {
		t.Errorf("paths with and without leading dot differ: %q != %q", a, b)
	}
	if a, b := MustParse(".spec.a"), MustParse(".spec.b"); a == b {
		t.Errorf("different paths are equal: %q == %q", a, b)
	}
}

func TestMustParse(t *testing.T) {
	if got := MustParse("spec.a").String(); got != ".spec.a" {
		t.Errorf("MustParse(%q).String() = %q, want %q", "spec.a", got, ".spec.a")
	}

	defer func() {
		r := recover()
		err, ok := r.(error)
		if !ok {
			t.Fatalf("MustParse of an invalid path panicked with %v, want an error", r)
		}
		if want := `invalid field path ".spec..name": empty field name at offset 6`; err.Error() != want {
			t.Errorf("MustParse panicked with %q, want %q", err, want)
		}
	}()
	MustParse(".spec..name")
	t.Error("MustParse of an invalid path did not panic")
}

// TestParseAgreesWithPattern checks that Parse accepts exactly the strings
// that the CRD validation accepts, on all short strings over an alphabet that
// exercises every grammar rule.
func TestParseAgreesWithPattern(t *testing.T) {
	alphabet := []string{".", "a", "Z", "0", "_", "-", "[", "*", "]", "[*]", " ", "é"}
	var check func(prefix string, depth int)
	check = func(prefix string, depth int) {
		_, err := Parse(prefix)
		if got, want := err == nil, matchesPattern(prefix); got != want {
			t.Errorf("Parse(%q) error = %v, but Pattern and MaxLength accept it: %v", prefix, err, want)
		}
		if depth == 0 {
			return
		}
		for _, s := range alphabet {
			check(prefix+s, depth-1)
		}
	}
	check("", 5)

	for _, s := range []string{
		strings.Repeat("a", MaxLength),
		strings.Repeat("a", MaxLength+1),
		"." + strings.Repeat("a", MaxLength-1),
		"." + strings.Repeat("a", MaxLength),
		strings.Repeat(".a[*]", MaxLength/5),
		strings.Repeat(".a[*]", MaxLength/5+1),
	} {
		_, err := Parse(s)
		if got, want := err == nil, matchesPattern(s); got != want {
			t.Errorf("Parse(%q) error = %v, but Pattern and MaxLength accept it: %v", s, err, want)
		}
	}
}

func TestSteps(t *testing.T) {
	for path, want := range map[string][]string{
		".spec.vpcRef.name":  {"spec", "vpcRef", "name"},
		"spec.nics[*].vpc":   {"spec", "nics", "", "vpc"},
		".matrix[*][*].name": {"matrix", "", "", "name"},
		".tags[*]":           {"tags", ""},
	} {
		if got := MustParse(path).Steps(); !reflect.DeepEqual(got, want) {
			t.Errorf("Steps(%s) = %q, want %q", path, got, want)
		}
	}
}
