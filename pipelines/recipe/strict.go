package recipe

import (
	"fmt"

	"github.com/goccy/go-yaml"
)

// decodeStrict decodes YAML data into v with strict decoding (unknown keys and duplicate keys are
// errors). A panic inside the YAML library (goccy/go-yaml v1.19.2 dereferences nil on some malformed
// sequences, e.g. "schemes:\n  ! 0") is returned as an error, so a bad recipe or --set value is
// reported, never a crash.
func decodeStrict(data []byte, v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the YAML decoder could not read this input (%v)", p)
		}
	}()
	return yaml.UnmarshalWithOptions(data, v, yaml.Strict())
}

// formatYAMLError renders a decoding error with the position the YAML library gives, when it gives one.
func formatYAMLError(err error) string {
	return yaml.FormatError(err, false, true)
}
