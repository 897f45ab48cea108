package fieldpath

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

const (
	// Pattern is a regular expression that, together with MaxLength, accepts
	// exactly the field paths that Parse accepts. It is used for OpenAPI
	// validation of the field path in the DependencyRule CRD.
	Pattern = `^\.?[A-Za-z0-9_-]+(\[\*\])*(\.[A-Za-z0-9_-]+(\[\*\])*)*$`

	// MaxLength is the maximum length of a field path in bytes. Valid paths
	// are ASCII, so this equals the OpenAPI maxLength, which counts
	// characters.
	MaxLength = 256
)

// wildcard is the only subscript a field path may contain.
const wildcard = "[*]"

// Path is a parsed field path. Paths are created by Parse or MustParse and
// are immutable, so they are safe for concurrent use. Two Paths are equal
// (==) if and only if their canonical forms are equal.
//
// The zero Path has no segments; resolving it yields nothing.
type Path struct {
	// s is the canonical form of the path: every field name is preceded by a
	// dot, e.g. ".spec.nics[*].vpcRef.name".
	s string
}

// Parse parses a field path as described in the package documentation.
func Parse(s string) (Path, error) {
	if s == "" {
		return Path{}, newParseError(s, "path is empty")
	}
	if len(s) > MaxLength {
		return Path{}, newParseError(s, fmt.Sprintf("length %d exceeds the maximum of %d bytes", len(s), MaxLength))
	}
	if s == "." {
		return Path{}, newParseError(s, "path has no field names")
	}

	i := 0
	if s[0] == '.' {
		i++
	}
	for {
		// A segment: a field name followed by any number of wildcards.
		start := i
		for i < len(s) && isNameChar(s[i]) {
			i++
		}
		if i == start {
			return Path{}, newParseError(s, describeMissingName(s, i))
		}
		for i < len(s) && s[i] == '[' {
			if !strings.HasPrefix(s[i:], wildcard) {
				return Path{}, newParseError(s, describeBadSubscript(s, i))
			}
			i += len(wildcard)
		}

		// The end of the path, or a dot introducing the next segment.
		switch {
		case i == len(s):
			if s[0] == '.' {
				return Path{s: s}, nil
			}
			return Path{s: "." + s}, nil
		case s[i] == '.':
			i++
		case isNameChar(s[i]):
			return Path{}, newParseError(s, fmt.Sprintf("missing '.' before field name at offset %d", i))
		default:
			return Path{}, newParseError(s, describeInvalidChar(s, i))
		}
	}
}

// String returns the canonical form of the path, which always starts with a
// dot, e.g. ".spec.vpcRef.name". The canonical form parses to an equal Path,
// except when it is longer than MaxLength, which happens only if the path was
// parsed from a string of exactly MaxLength bytes without a leading dot.
func (p Path) String() string {
	return p.s
}

// Steps returns the steps of the path in order: each field name, and the
// empty string for each [*].
func (p Path) Steps() []string {
	var steps []string
	for rest := p.s; rest != ""; {
		var name string
		name, rest = nextStep(rest)
		steps = append(steps, name)
	}
	return steps
}

// nextStep splits a non-empty suffix of a canonical path into its first step
// and the remainder. A step is either a field name, or the wildcard "[*]",
// which is returned as the empty name.
func nextStep(rest string) (name, remainder string) {
	if rest[0] == '[' {
		return "", rest[len(wildcard):]
	}
	// rest[0] is the dot preceding a field name.
	end := 1
	for end < len(rest) && rest[end] != '.' && rest[end] != '[' {
		end++
	}
	return rest[1:end], rest[end:]
}

func isNameChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

func newParseError(s, problem string) error {
	return fmt.Errorf("invalid field path %q: %s", s, problem)
}

// describeMissingName describes why no field name starts at offset i of s.
func describeMissingName(s string, i int) string {
	switch {
	case i == len(s):
		return fmt.Sprintf("trailing '.' at offset %d", i-1)
	case s[i] == '.':
		return fmt.Sprintf("empty field name at offset %d", i)
	case s[i] == '[':
		return fmt.Sprintf("%q at offset %d must follow a field name", wildcard, i)
	default:
		return describeInvalidChar(s, i)
	}
}

// describeBadSubscript describes the invalid subscript starting with the '['
// at offset i of s.
func describeBadSubscript(s string, i int) string {
	end := strings.IndexByte(s[i:], ']')
	if end < 0 {
		return fmt.Sprintf("unterminated '[' at offset %d", i)
	}
	return fmt.Sprintf("unsupported subscript %q at offset %d: only %q is allowed", s[i:i+end+1], i, wildcard)
}

// describeInvalidChar describes the invalid character at offset i of s.
func describeInvalidChar(s string, i int) string {
	// Quote the whole UTF-8 sequence, or the single byte if it is invalid.
	_, size := utf8.DecodeRuneInString(s[i:])
	return fmt.Sprintf("invalid character %q at offset %d: field names may only contain ASCII letters, digits, '_' and '-'", s[i:i+size], i)
}
