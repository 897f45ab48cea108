package fieldpath

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/buger/jsonparser"
)

// errStop is returned from jsonparser.ObjectEach callbacks to stop the
// iteration early.
var errStop = errors.New("stop iteration")

// errControlChar reports a raw control character in a JSON string.
var errControlChar = errors.New("control character in string")

// EachJSON calls fn for every string value (and number, in its canonical
// form, see NumberString) found at the path in the JSON
// object data, in document order, until fn returns false. It finds the same
// values as Resolve would on the decoded object, but scans data in place
// instead of decoding it.
//
// EachJSON returns an error if data is not a JSON object or if it finds
// malformed JSON while walking the path; see the package documentation for
// the extent of the validation. fn may already have been called when an
// error is returned.
func (p Path) EachJSON(data []byte, fn func(value string) bool) error {
	var scratch [64]byte
	return p.walkJSON(data, func(raw []byte, typ jsonparser.ValueType) (bool, error) {
		switch typ {
		case jsonparser.Number:
			return fn(NumberString(string(raw))), nil
		case jsonparser.String:
			value, err := decodeString(raw, scratch[:])
			if err != nil {
				return false, err
			}
			return fn(string(value)), nil
		}
		return true, nil
	})
}

// ResolveJSON returns every string value found at the path in the JSON object
// data, in document order, or nil if there is none. See EachJSON.
func (p Path) ResolveJSON(data []byte) ([]string, error) {
	var values []string
	err := p.EachJSON(data, func(value string) bool {
		values = append(values, value)
		return true
	})
	if err != nil {
		return nil, err
	}
	return values, nil
}

// walkJSON calls visit with the raw (undecoded) contents and the type of
// every value found at the path in the JSON object data (strings without
// their quotes) until visit returns false or an error.
//
// Unlike nested objects, the top-level object is always scanned to the end
// (unless visit stops early) so that truncated documents and trailing data are
// detected. This is cheaper than checking the document's structure upfront,
// which would scan it twice.
func (p Path) walkJSON(data []byte, visit func(raw []byte, typ jsonparser.ValueType) (bool, error)) error {
	start := skipWhitespace(data, 0)
	if start == len(data) {
		return errors.New("invalid JSON object: empty document")
	}
	if data[start] != '{' {
		return fmt.Errorf("invalid JSON object: top-level value at offset %d is not an object", start)
	}

	var name, rest string
	if p.s != "" {
		name, rest = nextStep(p.s) // a field name: paths start with one
	}
	matched := p.s == "" // the zero Path yields nothing
	end := start + 1     // the offset after '{' or the last value
	err := jsonparser.ObjectEach(data, func(key, value []byte, typ jsonparser.ValueType, offset int) error {
		end = offset
		if matched || string(key) != name {
			return nil
		}
		matched = true // duplicate keys are not supported: the first one wins
		cont, err := walkValue(value, typ, rest, visit)
		if err != nil {
			return err
		}
		if !cont {
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("invalid JSON object: %w", err)
	}

	// ObjectEach succeeded, so what follows the last value is a '}', possibly
	// preceded by a trailing comma that ObjectEach tolerates.
	i := skipWhitespace(data, end)
	if i == len(data) {
		return errors.New("invalid JSON object: unexpected end of document") // unreachable
	}
	if data[i] != '}' {
		return fmt.Errorf("invalid JSON object: unexpected %q at offset %d", data[i], i)
	}
	if i = skipWhitespace(data, i+1); i != len(data) {
		return fmt.Errorf("invalid JSON object: unexpected data after the top-level value at offset %d", i)
	}
	return nil
}

// skipWhitespace returns the offset of the first byte at or after offset i in
// data that is not JSON whitespace, or len(data).
func skipWhitespace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// walkValue calls visit for every value found at the canonical path suffix
// rest in the JSON value v of type typ. String values are passed without
// quotes and still escaped, numbers as their literal, objects and lists as
// they are. It returns false if visit asked to stop.
func walkValue(v []byte, typ jsonparser.ValueType, rest string, visit func(raw []byte, typ jsonparser.ValueType) (bool, error)) (bool, error) {
	if rest == "" {
		return visit(v, typ)
	}

	name, rest := nextStep(rest)
	cont := true
	if name == "" {
		if typ != jsonparser.Array {
			return true, nil
		}
		_, err := jsonparser.ArrayEachErr(v, func(elem []byte, elemTyp jsonparser.ValueType, _ int, err error) error {
			if err != nil {
				return err
			}
			if cont, err = walkValue(elem, elemTyp, rest, visit); err != nil {
				return err
			}
			if !cont {
				return io.EOF // stops ArrayEachErr without an error
			}
			return nil
		})
		return cont, err
	}

	if typ != jsonparser.Object {
		return true, nil
	}
	err := jsonparser.ObjectEach(v, func(key, value []byte, valueTyp jsonparser.ValueType, _ int) error {
		if string(key) != name {
			return nil
		}
		var err error
		if cont, err = walkValue(value, valueTyp, rest, visit); err != nil {
			return err
		}
		// Duplicate keys are not supported, so the first match is the only one.
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		return false, err
	}
	return cont, nil
}

// decodeString decodes the contents raw of a JSON string (without quotes) like
// encoding/json does. If raw needs no decoding it is returned as is. Otherwise
// scratch is used for the result if it is large enough.
func decodeString(raw, scratch []byte) ([]byte, error) {
	i := 0
	for i < len(raw) && raw[i] >= ' ' && raw[i] != '\\' && raw[i] < utf8.RuneSelf {
		i++
	}
	if i == len(raw) {
		return raw, nil // the common case: printable ASCII without escapes
	}

	escaped := false
	for _, c := range raw[i:] {
		if c < ' ' {
			return nil, errControlChar
		}
		if c == '\\' {
			escaped = true
		}
	}
	value := raw
	if escaped {
		var err error
		if value, err = jsonparser.Unescape(raw, scratch); err != nil {
			return nil, err
		}
	}
	if utf8.Valid(value) {
		return value, nil
	}
	// Like encoding/json, replace every byte that is not part of a valid
	// UTF-8 sequence with U+FFFD.
	valid := make([]byte, 0, len(value)+2*utf8.UTFMax)
	for len(value) > 0 {
		r, size := utf8.DecodeRune(value)
		if r == utf8.RuneError && size == 1 {
			valid = utf8.AppendRune(valid, utf8.RuneError)
		} else {
			valid = append(valid, value[:size]...)
		}
		value = value[size:]
	}
	return valid, nil
}

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
