package recipe

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// Set applies one override "dotted.path=value" (as given to `orkpipe build --set`). Path elements are YAML
// keys, and list indexes for lists ("schemes.1.group=64", or "schemes[1].group=64" as yq and Helm spell
// it); an index equal to the list's length appends.
// The value is decoded as YAML into the field's type (strings are taken verbatim), so a wrong type is an
// error naming the path. Set does not validate the recipe as a whole; Parse does that after all overrides.
func (r *Recipe) Set(assignment string) error {
	path, value, ok := strings.Cut(assignment, "=")
	if !ok || path == "" {
		return fmt.Errorf("%w: --set %q: want dotted.path=value", ErrInvalid, assignment)
	}
	path = bracketIndex.ReplaceAllString(path, ".$1")
	v := reflect.ValueOf(r).Elem()
	elems := strings.Split(path, ".")
	for i, key := range elems {
		where := strings.Join(elems[:i+1], ".")
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
				if r.created == nil {
					r.created = map[string]string{}
				}
				r.created[strings.Join(elems[:i], ".")] = assignment
			}
			v = v.Elem()
		}
		switch v.Kind() {
		case reflect.Struct:
			f, ok := fieldByYAMLKey(v, key)
			if !ok {
				return fmt.Errorf("%w: --set %s: unknown key %q (known: %s)", ErrInvalid, path, where, strings.Join(yamlKeys(v.Type()), ", "))
			}
			v = f
		case reflect.Slice:
			idx, err := strconv.Atoi(key)
			if err != nil || idx < 0 || idx > v.Len() {
				return fmt.Errorf("%w: --set %s: %q: want a list index from 0 to %d", ErrInvalid, path, where, v.Len())
			}
			if idx == v.Len() {
				v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
			}
			v = v.Index(idx)
		default:
			return fmt.Errorf("%w: --set %s: %q is a value, not a map or list", ErrInvalid, path, strings.Join(elems[:i], "."))
		}
	}
	if v.Kind() == reflect.String {
		v.SetString(value)
		return nil
	}
	if v.Kind() == reflect.Pointer && isNull(value) { // remove a section ("source.synth=null")
		v.Set(reflect.Zero(v.Type()))
		return nil
	}
	if v.Kind() == reflect.Pointer { // a whole section ("promote={to: I8, ...}"): decode into a new one
		target := reflect.New(v.Type().Elem())
		if err := decodeStrict([]byte(value), target.Interface()); err != nil {
			return fmt.Errorf("%w: --set %s=%s: %v", ErrInvalid, path, value, err)
		}
		v.Set(target)
		return nil
	}
	target := reflect.New(v.Type())
	if err := decodeStrict([]byte(value), target.Interface()); err != nil {
		return fmt.Errorf("%w: --set %s=%s: %v", ErrInvalid, path, value, err)
	}
	v.Set(target.Elem())
	return nil
}

// bracketIndex matches a list index written in brackets ("schemes[1]"), which Set reads as "schemes.1".
var bracketIndex = regexp.MustCompile(`\[([^\[\].]*)\]`)

func fieldByYAMLKey(v reflect.Value, key string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key && name != "-" {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" && t.Field(i).IsExported() {
			keys = append(keys, name)
		}
	}
	return keys
}

// isNull reports whether a --set value is YAML's null.
func isNull(value string) bool {
	switch strings.TrimSpace(value) {
	case "", "~", "null", "Null", "NULL":
		return true
	}
	return false
}
