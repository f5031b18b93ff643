package gguf

import "testing"

// TestTypeTable pins ids, block sizes and bytes per block to ggml-common.h / gguf-py's
// GGML_QUANT_SIZES (numbers written out, not computed).
func TestTypeTable(t *testing.T) {
	want := []struct {
		id        Type
		name      string
		bs, bytes int
	}{
		{0, "F32", 1, 4}, {1, "F16", 1, 2}, {2, "Q4_0", 32, 18}, {3, "Q4_1", 32, 20},
		{6, "Q5_0", 32, 22}, {7, "Q5_1", 32, 24}, {8, "Q8_0", 32, 34}, {9, "Q8_1", 32, 36},
		{10, "Q2_K", 256, 84}, {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
		{14, "Q6_K", 256, 210}, {15, "Q8_K", 256, 292}, {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
		{18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50}, {20, "IQ4_NL", 32, 18}, {21, "IQ3_S", 256, 110},
		{22, "IQ2_S", 256, 82}, {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1}, {25, "I16", 1, 2},
		{26, "I32", 1, 4}, {27, "I64", 1, 8}, {28, "F64", 1, 8}, {29, "IQ1_M", 256, 56},
		{30, "BF16", 1, 2}, {34, "TQ1_0", 256, 54}, {35, "TQ2_0", 256, 66}, {39, "MXFP4", 32, 17},
	}
	valid := map[Type]bool{}
	for _, w := range want {
		valid[w.id] = true
		if !w.id.Valid() || w.id.String() != w.name || w.id.BlockSize() != w.bs || w.id.BlockBytes() != w.bytes {
			t.Errorf("type %d: valid %v %s %d/%d, want %s %d/%d", w.id, w.id.Valid(), w.id, w.id.BlockSize(), w.id.BlockBytes(), w.name, w.bs, w.bytes)
		}
		if p, err := ParseType(w.name); err != nil || p != w.id {
			t.Errorf("ParseType(%q) = %d, %v", w.name, p, err)
		}
	}
	for _, id := range []Type{4, 5, 31, 32, 33, 36, 37, 38} {
		if id.Valid() || !id.Removed() {
			t.Errorf("type %d: valid %v removed %v, want removed", id, id.Valid(), id.Removed())
		}
	}
	for id := Type(0); id < 64; id++ {
		if id.Valid() != valid[id] {
			t.Errorf("type %d (%s): Valid() = %v", id, id, id.Valid())
		}
	}
	if rb, err := TypeQ4_K.RowBytes(512); err != nil || rb != 288 {
		t.Errorf("Q4_K row of 512 = %d, %v", rb, err)
	}
	if _, err := TypeQ8_0.RowBytes(48); err == nil {
		t.Error("Q8_0 row of 48: no error")
	}
}
