package gguf

import (
	"fmt"
	"regexp"
	"slices"
)

// NameSet is a set of tensor names (the tensors a pack owns, or an allow-list).
type NameSet map[string]struct{}

// NewNameSet returns the set of names.
func NewNameSet(names ...string) NameSet {
	s := make(NameSet, len(names))
	for _, n := range names {
		s[n] = struct{}{}
	}
	return s
}

// Has reports whether name is in the set (false for a nil set).
func (s NameSet) Has(name string) bool {
	_, ok := s[name]
	return ok
}

// Sorted returns the names in lexical order.
func (s NameSet) Sorted() []string {
	out := make([]string, 0, len(s))
	for n := range s {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// MatchTensors returns the names of f's tensors that re matches (anywhere in the name, as
// regexp.MatchString does; anchor the expression for whole names). Matching nothing is an
// error: an owned set that selects no tensor is a mistake, never a stub.
func MatchTensors(f *File, re *regexp.Regexp) (NameSet, error) {
	s := NameSet{}
	for _, t := range f.Tensors {
		if re.MatchString(t.Name) {
			s[t.Name] = struct{}{}
		}
	}
	if len(s) == 0 {
		return nil, fmt.Errorf("%s: %w: no tensor name matches %q", f.Path, ErrTensorNotFound, re)
	}
	return s, nil
}
