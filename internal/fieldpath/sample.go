package fieldpath

import (
	"encoding/json"
	"slices"
)

// Sample returns a JSON object, as decoded by encoding/json, in which the
// reference finds exactly name, in the dependent's namespace: every field
// on the way to the name, a wildcard as a list of one element, and the
// group and kind fields next to the name set to the values the reference
// wants. Sent as a merge patch, it sets the reference (replacing any list
// on the way); see tracking's probe of the check of new references.
func (r Reference) Sample(name string) map[string]any {
	if r.parent == (Path{}) && r.leaf == (Path{}) {
		out, _ := sample(r.name.Steps(), name).(map[string]any)
		return out
	}
	holder := map[string]any{}
	set(holder, r.leaf.Steps(), name)
	for _, d := range []discriminator{r.group, r.kind} {
		if d.path != (Path{}) {
			set(holder, d.path.Steps(), d.want)
		}
	}
	if r.parent == (Path{}) {
		return holder
	}
	out, _ := sample(r.parent.Steps(), holder).(map[string]any)
	return out
}

// sample returns the value that holds leaf at steps.
func sample(steps []string, leaf any) any {
	if len(steps) == 0 {
		return leaf
	}
	if steps[0] == "" {
		return []any{sample(steps[1:], leaf)}
	}
	return map[string]any{steps[0]: sample(steps[1:], leaf)}
}

// set sets value at steps (field names only) in obj, keeping what obj
// already holds on the way.
func set(obj map[string]any, steps []string, value any) {
	for _, step := range steps[:len(steps)-1] {
		next, ok := obj[step].(map[string]any)
		if !ok {
			next = map[string]any{}
			obj[step] = next
		}
		obj = next
	}
	obj[steps[len(steps)-1]] = value
}

// Rename sets the name of one reference that the JSON object data holds
// to name, and returns the object, as decoded by encoding/json, with
// nothing else changed: the first, in document order, at which the
// reference then finds name (one of the group and kind it wants). It
// reports false if data holds no such reference. Sent as a merge patch of
// the top-level field the reference lies in, the object sets one
// reference where a schema refuses Sample's (a list whose elements need
// other fields); see tracking's probe of the check of new references.
func (r Reference) Rename(data []byte, name string) (map[string]any, bool) {
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, false
	}
	var renamed map[string]any
	slots(obj, r.name.Steps(), func(set func(any) any) bool {
		old := set(name)
		raw, err := json.Marshal(obj)
		if err == nil {
			if found, err := r.ResolveJSON(raw); err == nil && slices.ContainsFunc(found, func(v Value) bool { return v.Name == name }) {
				renamed = obj
				return false
			}
		}
		set(old)
		return true
	})
	return renamed, renamed != nil
}

// slots calls visit for every string at steps in v, in document order,
// with a function that sets it to another value and returns the one it
// replaced, until visit returns false; it reports whether to go on.
func slots(v any, steps []string, visit func(set func(any) any) bool) bool {
	if len(steps) == 0 {
		return true
	}
	last := len(steps) == 1
	switch c := v.(type) {
	case map[string]any:
		if steps[0] == "" {
			return true
		}
		next, ok := c[steps[0]]
		if !ok {
			return true
		}
		if last {
			if _, isString := next.(string); !isString {
				return true
			}
			return visit(func(x any) any { old := c[steps[0]]; c[steps[0]] = x; return old })
		}
		return slots(next, steps[1:], visit)
	case []any:
		if steps[0] != "" {
			return true
		}
		for i := range c {
			if last {
				if _, isString := c[i].(string); !isString {
					continue
				}
				if !visit(func(x any) any { old := c[i]; c[i] = x; return old }) {
					return false
				}
				continue
			}
			if !slots(c[i], steps[1:], visit) {
				return false
			}
		}
	}
	return true
}
