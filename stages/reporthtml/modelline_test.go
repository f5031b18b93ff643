package reporthtml

import "testing"

// TestModelLine: the line says what is known of the model and nothing of what is not (nothing
// known: no line at all).
func TestModelLine(t *testing.T) {
	tests := []struct {
		name, version, arch, params, precision, quant string
		want                                          string
	}{
		{"stories260K", "1", "llama", "292800", "int4", "rtn-g32", "stories260K 1 (llama, 292800 params, int4, rtn-g32)"},
		{"", "", "", "", "", "", ""},
		{"demo", "", "", "", "", "", "demo"},
		{"", "", "llama", "", "", "gptq-g32", "(llama, gptq-g32)"},
		{"m", "v2", "", "7B", "", "", "m v2 (7B params)"},
	}
	for _, tc := range tests {
		if got := ModelLine(tc.name, tc.version, tc.arch, tc.params, tc.precision, tc.quant); got != tc.want {
			t.Errorf("ModelLine(%q, %q, %q, %q, %q, %q) = %q, want %q", tc.name, tc.version, tc.arch, tc.params, tc.precision, tc.quant, got, tc.want)
		}
	}
}
