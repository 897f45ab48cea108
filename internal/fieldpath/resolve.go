package fieldpath

// Resolve returns every string value found at the path in obj, in document
// order, or nil if there is none.
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
		if s, ok := v.(string); ok {
			out = append(out, s)
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
