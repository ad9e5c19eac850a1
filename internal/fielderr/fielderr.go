// Package fielderr is the error an owner of a configuration type gives
// for one field it refuses. The owner (engine, control, throttle, policy)
// keeps its bounds and says what it accepts; a caller that filled the
// field from a key of its own (a config file's, a flag) finds the field
// in the error and names its key instead, so each bound exists once and
// the user still reads the key they wrote.
package fielderr

import (
	"fmt"
	"strconv"
)

// Error is one refused field.
type Error struct {
	// Field names the field for callers that map it, as
	// "package.Type.Field" ("control.Params.Kp").
	Field string
	// Name is the field as the owner's own users read it ("Kp", "tick").
	Name string
	// Key is the element of a map or list field that is refused (a
	// resource's name, a port); "" for the field as a whole.
	Key string
	// Value is the refused value, in the owner's units.
	Value any
	// Want says what is accepted ("must be between 10ms and 10s").
	Want string
}

// New returns the error of field (name to its readers) at value.
func New(field, name string, value any, want string) *Error {
	return &Error{Field: field, Name: name, Value: value, Want: want}
}

// At returns the error of element key of a map or list field.
func At(field, name, key string, value any, want string) *Error {
	return &Error{Field: field, Name: name, Key: key, Value: value, Want: want}
}

func (e *Error) Error() string {
	name := e.Name
	if e.Key != "" {
		name += " " + strconv.Quote(e.Key)
	}
	return fmt.Sprintf("%s %v: %s", name, e.Value, e.Want)
}

// Split walks err (joined and wrapped errors) and returns the field
// errors in it and the other errors. A wrapper around field errors is
// dropped (the field says where), one around none is kept whole.
func Split(err error) (fields []*Error, other []error) {
	switch x := err.(type) {
	case nil:
		return nil, nil
	case *Error:
		return []*Error{x}, nil
	case interface{ Unwrap() []error }:
		for _, e := range x.Unwrap() {
			f, o := Split(e)
			fields, other = append(fields, f...), append(other, o...)
		}
		return fields, other
	case interface{ Unwrap() error }:
		f, o := Split(x.Unwrap())
		if len(f) == 0 {
			return nil, []error{err}
		}
		return f, o
	}
	return nil, []error{err}
}
