package model

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Pre-tokenizers: llama.cpp's llm_tokenizer_bpe splits text with a list of regular expressions
// (regex_exprs, per LLAMA_VOCAB_PRE_TYPE_*) before BPE merges run within each piece. Each expression
// cuts every piece of the previous one; its matches and the text between them become pieces. Here an
// expression is a stage: a hand-written scanner where llama.cpp has one (pretok_custom.go), else a
// pattern of items matched as llama.cpp's std::regex matches it (pretok_regex.go).

// preText is a text as the pre-tokenizer sees it: llama.cpp's code points, and the regex keys of
// each (built on first use).
type preText struct {
	cpts []rune
	keys [2][]rune
}

func (t *preText) keysFor(m keyMode) []rune {
	if t.keys[m] == nil {
		k := make([]rune, len(t.cpts))
		for i, c := range t.cpts {
			if m == keysCollapsed {
				k[i] = collapsedKey(c)
			} else {
				k[i] = wideKey(c)
			}
		}
		t.keys[m] = k
	}
	return t.keys[m]
}

// preStage cuts the piece [ini, end) of t and appends the lengths (in code points) of its pieces.
type preStage interface {
	split(t *preText, ini, end int, out []int) []int
}

// regexStage is one std::regex expression: matches and the runs between them become pieces.
// The patterns never match the empty string.
type regexStage pattern

func (s *regexStage) split(t *preText, ini, end int, out []int) []int {
	p := (*pattern)(s)
	m := newMatcher(t.keysFor(p.mode), end)
	gap := ini
	for pos := ini; pos < end; {
		e := m.matchAt(p, pos)
		if e <= pos {
			pos++
			continue
		}
		if pos > gap {
			out = append(out, pos-gap)
		}
		out = append(out, e-pos)
		pos, gap = e, e
	}
	if gap < end {
		out = append(out, end-gap)
	}
	return out
}

func collapsed(alts ...[]item) *regexStage { return &regexStage{mode: keysCollapsed, alts: alts} }
func wide(alts ...[]item) *regexStage      { return &regexStage{mode: keysWide, alts: alts} }

// preSpec is one LLAMA_VOCAB_PRE_TYPE_*: its stages, and whether pieces are GPT-2 byte-encoded before
// merging (llama.cpp's byte_encode; false for SPM-style BPE vocabularies that hold raw UTF-8).
type preSpec struct {
	name       string
	stages     []preStage
	byteEncode bool
}

// split returns the piece lengths, in code points, of all of t.
func (p *preSpec) split(t *preText) []int {
	pieces := []int{len(t.cpts)}
	if len(t.cpts) == 0 {
		return nil
	}
	var next []int
	for _, s := range p.stages {
		next = next[:0]
		pos := 0
		for _, n := range pieces {
			next = s.split(t, pos, pos+n, next)
			pos += n
		}
		pieces, next = next, pieces
	}
	return pieces
}

// Shared pieces of the llama3-like patterns (collapsed keys).
var (
	// \s*[\r\n]+|\s+(?!\S)|\s+
	wsTail = [][]item{seq(spaceNL()), seq(plus(clsSpace), notAhead(clsNotSp)), seq(plus(clsSpace))}
	// ?[^\s\p{L}\p{N}]+ followed by trail*
	otherRun = func(trail *charClass) []item { return seq(opt(chars(" ")), plus(clsOther), star(trail)) }
	// The upper- and lower-case letter classes of the tekken/gpt-4o patterns: (?=[\p{L}])[^a-z] and
	// (?=[\p{L}])[^A-Z]; only ASCII has case in collapsed keys.
	clsUpper       = minus(clsLetter, span('a', 'z'))
	clsLower       = minus(clsLetter, span('A', 'Z'))
	clsUpperMarked = minus(clsLetMark, span('a', 'z'))
	clsLowerMarked = minus(clsLetMark, span('A', 'Z'))
	crlfSlash      = chars("\r\n/")
	// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	deepseek3Main = collapsed(append([][]item{
		seq(one(chars("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")), plus(union(span('A', 'Z'), span('a', 'z')))),
		seq(opt(not(union(clsCRLF, clsLetter, clsPunct, clsSymbol))), plus(clsLetMark)),
		seq(opt(chars(" ")), plus(union(clsPunct, clsSymbol)), star(clsCRLF)),
	}, wsTail...)...)
)

// caseWords returns X?U*L+C?|X?U+L*C? (the tekken/gpt-4o word alternatives), C the optional
// contraction when withContraction.
func caseWords(upper, lower *charClass, withContraction bool) [][]item {
	a := seq(opt(clsPrefix), star(upper), plus(lower))
	b := seq(opt(clsPrefix), plus(upper), star(lower))
	if withContraction {
		a, b = append(a, contractions(true)), append(b, contractions(true))
	}
	return [][]item{a, b}
}

// cat concatenates alternative lists.
func cat(groups ...[][]item) [][]item {
	var out [][]item
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

var (
	stGPT2    = customStage(gpt2Cut)
	stLlama3  = llama3Cut(cpLetter, 3)
	stQwen2   = llama3Cut(cpLetter, 1)
	stQwen35  = llama3Cut(cpLetter|cpMark, 1)
	stNumber1 = collapsed(seq(one(clsNumber)))                         // \p{N}
	stNumbers = collapsed(seq(plus(clsNumber)))                        // \p{N}+
	stNumber3 = collapsed(seq(run(clsNumber, 1, 3)))                   // \p{N}{1,3}
	stDigits3 = wide(seq(one(clsDigit), one(clsDigit), one(clsDigit))) // [0-9][0-9][0-9]
	stCRLF    = wide(seq(one(clsCRLF)))                                // [\r\n]
	stNewline = customStage(newlinesCut)
	// ?[^(\s|.,!?…。，、।۔،)]+
	stPoro = wide(seq(opt(chars(" ")), plus(not(union(clsSpace, chars("(|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)"))))))
	// [一-龥ࠀ-一가-퟿]+
	stCJKDeepseek = wide(seq(plus(union(span('\u4E00', '\u9FA5'), span('\u0800', '\u4E00'), span('\uAC00', '\uD7FF')))))
	// [一-龥぀-ゟ゠-ヿ]+
	stCJKKana = wide(seq(plus(union(span('\u4E00', '\u9FA5'), span('\u3040', '\u309F'), span('\u30A0', '\u30FF')))))
)

// preSpecs holds every LLAMA_VOCAB_PRE_TYPE_* llama.cpp's llm_tokenizer_bpe knows, by enum name.
// Built on first use (about 1,700 allocations): only commands that tokenize need it, and a package
// init would cost every orkpipe command its start-up time.
var preSpecs = sync.OnceValue(func() map[string]*preSpec {
	m := map[string]*preSpec{}
	def := func(stages []preStage, byteEncode bool, names ...string) {
		for _, n := range names {
			m[n] = &preSpec{name: n, stages: stages, byteEncode: byteEncode}
		}
	}
	def([]preStage{stLlama3}, true, "LLAMA3", "DBRX", "SMAUG", "CHATGLM4")
	def([]preStage{collapsed(cat(
		[][]item{seq(contractions(false)), seq(opt(clsPrefix), plus(clsLetter)), seq(run(clsNumber, 1, 3)),
			otherRun(clsCRLF), seq(spaceNL())},
		func() [][]item { // \s{512}(?!\S)|...|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}
			var w [][]item
			for n := 512; n >= 4; n /= 2 {
				w = append(w, seq(run(clsSpace, n, n), notAhead(clsNotSp)))
			}
			return append(w, seq(run(clsSpace, 1, 2), notAhead(clsNotSp)), seq(one(clsSpace)))
		}(),
	)...)}, true, "JAIS2")
	def([]preStage{
		stCRLF,
		// \s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+
		wide(seq(opt(clsSpace), plus(bracket("A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943")))),
		// \s?[!-/:-~！-／：-～‘-‟　-。]+
		wide(seq(opt(clsSpace), plus(bracket("!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002")))),
		customStage(trailingSpaceCut), // \s+$
		stCJKDeepseek,
		stNumbers,
	}, true, "DEEPSEEK_LLM")
	def([]preStage{stNumber3, stCJKKana, deepseek3Main}, true, "DEEPSEEK3_LLM", "HUNYUAN_DENSE", "JOYAI_LLM")
	def([]preStage{
		// [가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+
		wide(seq(plus(bracket("\uAC00-\uD7A3\u3131-\u318E"))), seq(plus(bracket("\uFF01\u2026\u201C\u201D\u2018\u2019\u2014\uFF1A\uFF1B\uFF0C\u3001-\u303F\uFE30-\uFE4F"))), seq(plus(bracket("\u3105-\u312F"))),
			seq(plus(bracket("\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF")))),
		collapsed(cat(caseWords(clsLetMark, clsLetMark, true), [][]item{seq(one(clsNumber)), otherRun(crlfSlash)}, wsTail)...),
	}, true, "YOUTU")
	def([]preStage{
		stCRLF,
		collapsed(seq(opt(clsSpace), plus(clsLetter))), // \s?\p{L}+
		collapsed(seq(opt(clsSpace), plus(clsPunct))),  // \s?\p{P}+
		stCJKDeepseek,
		stNumber1,
	}, true, "DEEPSEEK_CODER")
	def([]preStage{collapsed(seq(plus(union(clsPunct, chars("$+<=>^~|`"))))), stGPT2, stDigits3}, true, "FALCON")
	def([]preStage{stNumber1, stGPT2}, true,
		"STARCODER", "REFACT", "COMMAND_R", "SMOLLM", "CODESHELL", "EXAONE", "MINERVA", "MELLUM2")
	def([]preStage{stGPT2}, true, "GPT2", "MPT", "OLMO", "JAIS", "TRILLION", "GRANITE_DOCLING")
	def([]preStage{stQwen2}, true, "STABLELM2", "QWEN2", "HUNYUAN", "SOLAR_OPEN", "GROK_2")
	def([]preStage{stQwen35}, true, "QWEN35")
	def([]preStage{stPoro}, true, "PORO", "BLOOM", "GPT3_FINNISH")
	def([]preStage{stPoro, stNumber1}, true, "VIKING")
	def([]preStage{collapsed(cat(caseWords(clsUpper, clsLower, false), [][]item{seq(one(clsNumber)), otherRun(crlfSlash)}, wsTail)...)},
		true, "TEKKEN")
	def([]preStage{
		wide(seq(lit("<sentinel:"), plus(clsDigit), lit(">"))),        // <sentinel:[0-9]+>
		wide(seq(lit("IMGIMG"), run(bracket("A-I"), 1, 4), lit("Z"))), // (IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z
		wide(seq(alt(false, "\t", "\n", "    ", "  "))),               // ([\t\n]|    |  )
		stNumber1, // \p{N}
		collapsed(seq(one(union(clsPunct, bracket("!-/:-@[-`{-~"))))), // [\p{P}!-/:-@\[-`{-~]
		stGPT2,
	}, true, "CHAMELEON")
	def([]preStage{collapsed(cat(caseWords(clsUpper, clsLower, true), [][]item{seq(run(clsNumber, 1, 3)), otherRun(crlfSlash)}, wsTail)...)},
		true, "GPT4O", "MINIMAX_M2")
	def([]preStage{collapsed(cat(caseWords(clsUpperMarked, clsLowerMarked, true), [][]item{seq(run(clsNumber, 1, 3)), otherRun(crlfSlash)}, wsTail)...)},
		true, "GRANITE_EMB_MULTI")
	def([]preStage{customStage(digitGroupsCut),
		collapsed(cat(caseWords(clsLetMark, clsLetMark, true), [][]item{seq(run(clsNumber, 1, 3)), otherRun(crlfSlash)}, wsTail)...)},
		true, "TINY_AYA")
	def([]preStage{customStage(kimiK2Cut)}, true, "KIMI_K2")
	def([]preStage{stNumbers, customStage(digitTriplesCut)}, true, "SUPERBPE")
	def([]preStage{collapsed(
		seq(alt(false, "'S", "'D", "'M", "'T", "'LL", "'VE", "'RE")), seq(opt(clsPrefix), plus(clsLetter)), seq(one(clsNumber)),
		otherRun(clsCRLF), seq(spaceNL()), wsTail[1], wsTail[2])}, true, "BAILINGMOE")
	def([]preStage{collapsed(cat([][]item{seq(contractions(false)), seq(opt(clsPrefix), plus(clsLetter)), seq(one(clsNumber)),
		seq(opt(chars(" ")), plus(not(union(clsSpace, clsLetter, clsNumber, clsCRLF))))}, wsTail)...)}, true, "SEED_CODER")
	def([]preStage{
		customStage(digitGroupsCut),
		// [一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+
		wide(seq(plus(bracket("\u4E00-\u9FFF\u3400-\u4DBF\u8C48-\uFAFF\u3040-\u309F\u30A0-\u30FF\uFF65-\uFF9F\u2F00-\u2FDF\u0E40-\u0E7F\u0E80-\u0EFF\u1780-\u17FF\u1000-\u109F\uAA60-\uAA7F\uA9E0-\uA9FF\uAC00-\uD7AF\u1100-\u11FF")))),
		deepseek3Main,
	}, true, "AFMOE")
	def([]preStage{stNewline, stQwen2}, true, "LAGUNA")
	def([]preStage{collapsed(seq(contractions(false)), seq(opt(clsPrefix), item{kind: itemWords}), seq(one(clsNumber)),
		seq(opt(chars(" ")), plus(clsOther), opt(crlfSlash)), seq(spaceNL()), wsTail[1], wsTail[2])},
		true, "EXAONE_MOE")
	def([]preStage{stNewline}, false, "GEMMA4", "SARVAM_MOE")
	def([]preStage{stNumber3, collapsed(cat([][]item{seq(contractions(false)), seq(opt(clsPrefix), plus(clsLetter)), seq(plus(clsNumber)),
		otherRun(clsCRLF)}, wsTail)...)}, true, "MINICPM5")
	def([]preStage{wide(seq(plus(clsNotSp)))}, false, "WHITESPACE") // \S+
	def([]preStage{collapsed(seq(plus(union(clsPunct, chars("$+<=>^~|"))))), stGPT2, stNumbers, stDigits3}, true,
		"DEFAULT", "CHATGLM3", "LLAMA4", "PIXTRAL")
	return m
})

// bracket is the class of a regex bracket expression body: code points and lo-hi ranges.
func bracket(body string) *charClass {
	r := []rune(body)
	var parts []*charClass
	for i := 0; i < len(r); i++ {
		if i+2 < len(r) && r[i+1] == '-' {
			parts = append(parts, span(r[i], r[i+2]))
			i += 2
			continue
		}
		parts = append(parts, span(r[i], r[i]))
	}
	return union(parts...)
}

// preOptions is what tokenizer.ggml.pre selects in llama.cpp's llama_vocab::impl::load: the pre-
// tokenizer type and the vocabulary flags set with it.
type preOptions struct {
	spec *preSpec
	// ignoreMerges: a piece that is a whole token is emitted as that token without merging.
	ignoreMerges bool
	// addBOS: the add_bos default becomes true (tokenizer.ggml.add_bos_token still overrides it).
	addBOS bool
	// addSep: the add_sep default becomes true.
	addSep bool
	// noBOS: the default bos_token_id is cleared (tokenizer.ggml.bos_token_id still overrides it).
	noBOS bool
	// escapeWhitespace: spaces become U+2581 before pre-tokenization (SPM-style BPE).
	escapeWhitespace bool
	// noLowercase: the normalizer's lowercase default becomes false.
	noLowercase bool
}

// preNames maps every tokenizer.ggml.pre llama.cpp accepts to its options ("" is "default"); built
// on first use, as preSpecs.
var preNames = sync.OnceValue(func() map[string]preOptions {
	m := map[string]preOptions{}
	add := func(typ string, o preOptions, names ...string) {
		o.spec = preSpecs()[typ]
		if o.spec == nil {
			panic("pretok: no spec for " + typ)
		}
		for _, n := range names {
			m[n] = o
		}
	}
	add("DEFAULT", preOptions{}, "", "default")
	add("MINICPM5", preOptions{ignoreMerges: true}, "minicpm5")
	add("LLAMA3", preOptions{ignoreMerges: true, addBOS: true},
		"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano")
	add("DEEPSEEK_LLM", preOptions{}, "deepseek-llm")
	add("DEEPSEEK_CODER", preOptions{}, "deepseek-coder")
	add("DEEPSEEK3_LLM", preOptions{}, "deepseek-v3")
	add("YOUTU", preOptions{ignoreMerges: true}, "youtu")
	add("FALCON", preOptions{}, "falcon")
	add("MPT", preOptions{}, "mpt")
	add("STARCODER", preOptions{}, "starcoder")
	add("GPT2", preOptions{}, "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
		"mellum", "modern-bert", "exaone4")
	add("JAIS2", preOptions{}, "jais-2")
	add("GEMMA4", preOptions{escapeWhitespace: true}, "gemma4", "granite-embed-multi-311m")
	add("SARVAM_MOE", preOptions{escapeWhitespace: true}, "sarvam-moe")
	add("GPT2", preOptions{addSep: true}, "jina-v1-en", "jina-v2-code", "roberta-bpe")
	add("WHITESPACE", preOptions{noLowercase: true}, "whitespace")
	add("REFACT", preOptions{}, "refact")
	add("COMMAND_R", preOptions{}, "command-r")
	add("QWEN2", preOptions{}, "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez")
	add("QWEN35", preOptions{}, "qwen35")
	add("STABLELM2", preOptions{}, "stablelm2")
	add("OLMO", preOptions{}, "olmo")
	add("DBRX", preOptions{}, "dbrx")
	add("SMAUG", preOptions{}, "smaug-bpe")
	add("PORO", preOptions{}, "poro-chat")
	add("CHATGLM4", preOptions{noBOS: true}, "glm4", "chatglm-bpe")
	add("VIKING", preOptions{}, "viking")
	add("JAIS", preOptions{}, "jais")
	add("TEKKEN", preOptions{ignoreMerges: true, addBOS: true}, "tekken")
	add("SMOLLM", preOptions{}, "smollm")
	add("CODESHELL", preOptions{}, "codeshell")
	add("BLOOM", preOptions{}, "bloom")
	add("GPT3_FINNISH", preOptions{}, "gpt3-finnish")
	add("EXAONE", preOptions{}, "exaone")
	add("EXAONE_MOE", preOptions{}, "exaone-moe")
	add("CHAMELEON", preOptions{addBOS: true}, "chameleon")
	add("MINERVA", preOptions{}, "minerva-7b")
	add("GPT4O", preOptions{}, "gpt-4o", "llama4", "kanana2", "talkie")
	add("GRANITE_EMB_MULTI", preOptions{ignoreMerges: true}, "granite-embed-multi-97m")
	add("TINY_AYA", preOptions{}, "tiny_aya", "cohere2moe")
	add("SUPERBPE", preOptions{}, "superbpe")
	add("TRILLION", preOptions{}, "trillion")
	add("GRANITE_DOCLING", preOptions{}, "granite-docling")
	add("BAILINGMOE", preOptions{}, "bailingmoe", "bailingmoe2", "llada-moe")
	add("SEED_CODER", preOptions{}, "seed-coder")
	add("HUNYUAN", preOptions{}, "hunyuan")
	add("HUNYUAN_DENSE", preOptions{}, "hunyuan-dense")
	add("JOYAI_LLM", preOptions{}, "joyai-llm")
	add("KIMI_K2", preOptions{}, "kimi-k2")
	add("GROK_2", preOptions{}, "grok-2")
	add("AFMOE", preOptions{}, "afmoe")
	add("LAGUNA", preOptions{}, "laguna")
	add("MINIMAX_M2", preOptions{}, "minimax-m2")
	add("SOLAR_OPEN", preOptions{}, "solar-open")
	add("MELLUM2", preOptions{}, "mellum2")
	return m
})

// preOptionsFor returns the options of tokenizer.ggml.pre, or ErrUnsupported naming it (llama.cpp
// refuses an unknown pre-tokenizer too).
func preOptionsFor(pre string) (preOptions, error) {
	o, ok := preNames()[pre]
	if !ok {
		return o, fmt.Errorf("tokenizer.ggml.pre %q: %w (llama.cpp at the reference commit knows %d names, e.g. %s)",
			pre, ErrUnsupported, len(preNames()), strings.Join(knownPreSample(), ", "))
	}
	return o, nil
}

func knownPreSample() []string {
	var names []string
	for n := range preNames() {
		if n != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names[:8]
}
