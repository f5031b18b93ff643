package daggerexec

// WithWholeInputs sends every input as it is, holes as zeros (no tar forms): the baseline the
// engine tests measure the tar forms against.
func WithWholeInputs() Option {
	return func(c *config) error { c.wholeInputs = true; return nil }
}
