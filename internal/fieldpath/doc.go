/*
Package fieldpath parses and resolves the field paths used by DependencyRules.

A DependencyRule states that objects of one type reference objects of another
type by name at a field path. When an object of the referenced type is
deleted, the admission webhook lists the dependent objects and checks whether
any value at that path equals the name of the object being deleted.

# Grammar

A field path is a dot-separated list of field names, each of which may be
followed by any number of "[*]" wildcards:

	path    = [ "." ] segment { "." segment }
	segment = name { "[*]" }
	name    = 1*( ALPHA / DIGIT / "_" / "-" )

ALPHA and DIGIT are the ASCII letters and digits. The leading dot is optional;
the canonical form, returned by Path.String, always has it. A path is at most
MaxLength bytes long. Array indices ("[0]"), quoting, escaping, map keys with
other characters and whitespace are not supported.

Examples:

	.spec.vpcRef.name           a string field
	spec.vpcRef.name            the same path, without the leading dot
	.spec.nics[*].vpcRef.name   a field of every element of a list of objects
	.spec.vpcNames[*]           every element of a list of strings
	.spec.matrix[*][*].ref      a field of every element of a list of lists

The same language is accepted by the regular expression Pattern together with
the MaxLength limit, which the CRD uses for OpenAPI validation, so a path that
the API server admits can always be parsed.

# Resolution

Resolving a path against an object yields every string found at that path,
in document order:

  - a field name selects the field of an object; anything else (a missing
    field, a list, a scalar, null) yields nothing;
  - "[*]" selects every element of a list; on anything else it yields nothing;
  - a value found at the end of the path is yielded if it is a string, or a
    number in its canonical decimal form (see NumberString: 42 for 42, 42.0
    and 4.2e1; 1.5 for 1.50), so that a name held in a field declared
    int-or-string as a number (42) matches the object named "42";
    booleans, null, objects and lists are ignored. In particular a list of
    strings is only entered via "[*]".

Path.Resolve works on decoded unstructured objects (map[string]any, as
produced by encoding/json and used by unstructured.Unstructured).
Path.EachJSON, Path.ResolveJSON and Path.ContainsJSON work on the raw JSON
encoding of an object without decoding it, which is much cheaper when only a
few fields of a large object are of interest.

# Raw JSON

The raw JSON resolvers decode JSON strings exactly like encoding/json, including
escape sequences ("\u0076pc" is "vpc") and the replacement of invalid UTF-8
and unpaired surrogates with U+FFFD. For documents that encoding/json accepts
and that contain no duplicate object keys they return the same values as
decoding the document with encoding/json and calling Path.Resolve.

They do not fully validate the document. They report a document that is
empty, truncated, followed by trailing data or not an object, as well as
malformed JSON that they encounter while walking the path, such as a missing
comma or colon, an invalid literal, or an invalid escape sequence or control
character in a string found at the end of the path. But values they skip over are only
scanned far enough to find their end, so for example {"a":[1 2],"b":"x"}
resolves .b to "x" without an error. Objects with duplicate keys are not
supported either: the raw JSON resolvers use the first occurrence of a key,
whereas encoding/json uses the last one. Kubernetes API servers emit neither
malformed JSON nor duplicate keys.
*/
package fieldpath
