package boardhost

import (
	"errors"
	"reflect"
	"testing"
)

func TestSplitCommand(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{"llama-perplexity -m {stub} -f {text}", []string{"llama-perplexity", "-m", "{stub}", "-f", "{text}"}, false},
		{"  a\tb\n c  ", []string{"a", "b", "c"}, false},
		{`a 'b c' "d e"`, []string{"a", "b c", "d e"}, false},
		{`a 'it''s'`, []string{"a", "its"}, false},
		{`a "say \"hi\" \\ \n"`, []string{"a", `say "hi" \ \n`}, false},
		{`a 'x\"y'`, []string{"a", `x\"y`}, false},
		{`a b\ c`, []string{"a", "b c"}, false},
		{`a ''`, []string{"a", ""}, false},
		{`a --x="{pack}"`, []string{"a", "--x={pack}"}, false},
		{`sh -c 'ORK_OFF=1 run {pack} | tee log'`, []string{"sh", "-c", "ORK_OFF=1 run {pack} | tee log"}, false},
		{`a $HOME *.gguf >out`, []string{"a", "$HOME", "*.gguf", ">out"}, false},
		{"", nil, true},
		{"   ", nil, true},
		{`a 'b`, nil, true},
		{`a "b`, nil, true},
		{`a b\`, nil, true},
	} {
		got, err := SplitCommand(tc.in)
		if tc.err {
			if !errors.Is(err, ErrCommand) {
				t.Errorf("SplitCommand(%q) = %q, %v; want ErrCommand", tc.in, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestExpandCommand(t *testing.T) {
	in := Inputs{Pack: "/p/m.orkpack", Stub: "/p/m.gguf", Text: "/t/eval.txt"}
	for _, tc := range []struct {
		argv []string
		in   Inputs
		want []string
		err  bool
	}{
		{[]string{"run", "-m", "{stub}", "--model={stub}", "-f", "{text}"}, in, []string{"run", "-m", "/p/m.gguf", "--model=/p/m.gguf", "-f", "/t/eval.txt"}, false},
		{[]string{"run", "{pack}{stub}"}, in, []string{"run", "/p/m.orkpack/p/m.gguf"}, false},
		{[]string{"run", `{"json": 1}`, "{pack}", "{", "}{"}, in, []string{"run", `{"json": 1}`, "/p/m.orkpack", "{", "}{"}, false},
		{[]string{"run", "{text}"}, in, nil, true},                 // neither pack nor stub
		{[]string{"run", "{pack}", "{model}"}, in, nil, true},      // unknown placeholder
		{[]string{"run", "{stub}"}, Inputs{Pack: "/p"}, nil, true}, // stub path empty
	} {
		got, err := ExpandCommand(tc.argv, tc.in)
		if tc.err {
			if !errors.Is(err, ErrCommand) {
				t.Errorf("ExpandCommand(%q) = %q, %v; want ErrCommand", tc.argv, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ExpandCommand(%q) = %q, %v; want %q", tc.argv, got, err, tc.want)
		}
	}
}
