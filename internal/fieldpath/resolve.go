package fieldpath

import (
	"encoding/json"
	"math"
	"strconv"
)

// NumberString returns the canonical form of a JSON number literal, which is
// how a number at the end of a path compares with a name: an integer in
// decimal (42, -7, and 42.0 or 4.2e1 as 42), anything else as the shortest
// decimal that reads back as the same float64 (1.5). A literal that is not a
// valid number, or out of the float64 range, is returned as it is. Fields
// declared int-or-string hold names such as "42" as the number 42, which thus
// matches.
func NumberString(literal string) string {
	if i, err := strconv.ParseInt(literal, 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	f, err := strconv.ParseFloat(literal, 64)
	if err != nil {
		return literal
	}
	return floatString(f)
}

// floatString formats a float64 like NumberString.
func floatString(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

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
