package fieldpath

import (
	"encoding/json"
	"strconv"

	"github.com/buger/jsonparser"
)

// The reference implementations the differential tests compare EachJSON and
// ResolveJSON with: the obvious walk over a decoded object, and a search
// that stops at the first match.

// Resolve returns every string value (and number, in its canonical form, see
// NumberString) found at the path in obj, in document order, or nil if there
// is none.
//
// obj is an unstructured object as produced by encoding/json or used by
// unstructured.Unstructured: objects are map[string]any and lists are []any.
// Values of any other type, including typed slices and maps, are treated as
// scalars. Resolve never panics.
func (p Path) Resolve(obj map[string]any) []string {
	return resolve(obj, p.s, nil)
}

// resolve appends the string values found at the canonical path suffix rest
// in v to out.
func resolve(v any, rest string, out []string) []string {
	if rest == "" {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case json.Number:
			out = append(out, NumberString(string(x)))
		case int64:
			out = append(out, strconv.FormatInt(x, 10))
		case int:
			out = append(out, strconv.Itoa(x))
		case float64:
			out = append(out, floatString(x))
		}
		return out
	}

	name, rest := nextStep(rest)
	if name == "" {
		list, _ := v.([]any)
		for _, elem := range list {
			out = resolve(elem, rest, out)
		}
		return out
	}

	obj, _ := v.(map[string]any)
	if child, ok := obj[name]; ok {
		out = resolve(child, rest, out)
	}
	return out
}

// ContainsJSON reports whether any string value found at the path in the JSON
// object data equals want. It stops scanning at the first match, so malformed
// JSON after it is not reported. It does not
// allocate unless a value it compares both contains escape sequences and is
// longer than 64 bytes, or contains invalid UTF-8. See EachJSON for the errors
// it returns.
func (p Path) ContainsJSON(data []byte, want string) (bool, error) {
	found := false
	err := p.walkJSON(data, func(raw []byte, typ jsonparser.ValueType) (bool, error) {
		switch typ {
		case jsonparser.Number:
			found = NumberString(string(raw)) == want
			return !found, nil
		case jsonparser.String:
		default:
			return true, nil
		}
		var scratch [64]byte
		value, err := decodeString(raw, scratch[:])
		if err != nil {
			return false, err
		}
		found = string(value) == want
		return !found, nil
	})
	if err != nil {
		return false, err
	}
	return found, nil
}

// MustParse is like Parse but panics if s is not a valid field path.
func MustParse(s string) Path {
	p, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return p
}
