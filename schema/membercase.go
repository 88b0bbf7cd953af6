package schema

import (
	"fmt"
	"reflect"
	"strings"
)

// CheckMemberCase reports, wrapped in ErrInvalidJSON, a member of the
// JSON object b whose name differs only in case from a member of v's
// struct type (its json names): {"Session":"x"} for a body with a
// "session" member. Member names are case-sensitive, and such a member
// would otherwise be ignored silently as unknown, the request read as if
// it had none. Other unknown members are accepted. b must be one valid
// JSON value (Unmarshal it first); anything but an object, and a v that
// is not a pointer to a struct, is not checked. Safe for concurrent use.
func CheckMemberCase(b []byte, v any) error {
	known := jsonNames(v)
	if len(known) == 0 || firstByte(b) != '{' {
		return nil
	}
	r := getReader(b)
	defer putReader(r)
	dec := r.dec
	if _, err := dec.ReadToken(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidJSON, err)
		}
		if err := caseVariant("", []byte(tok.String()), known); err != nil {
			return fmt.Errorf("%w: %s", ErrInvalidJSON, err)
		}
		if err := dec.SkipValue(); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidJSON, err)
		}
	}
	return nil
}

// jsonNames returns the json member names of the struct v points to.
func jsonNames(v any) []string {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	t = t.Elem()
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}
