package fieldpath

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
