package boardhost

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Scores are the numbers parsed from llama-perplexity output (llama.cpp tools/perplexity).
//
// PPL comes from "Final estimate: PPL = X +/- Y" (perplexity mode). In KL-divergence mode
// (--kl-divergence) llama-perplexity prints no final estimate; PPL is then "Mean PPL(Q)" and
// PPLSource says so. Chunks is the highest chunk index printed ("[N]x.xxxx," in perplexity
// mode, the chunk table in KL-divergence mode). KLD holds the KL-divergence summary, keyed as in
// [KLDKeys]; percentages are kept in percent, as printed.
type Scores struct {
	PPL       float64            `json:"ppl"`
	PPLErr    float64            `json:"ppl_err"`
	PPLSource string             `json:"ppl_source"`
	Chunks    int                `json:"chunks"`
	KLD       map[string]float64 `json:"kld,omitempty"`
}

// PPL sources.
const (
	PPLFromFinalEstimate = "final-estimate"
	PPLFromMeanPPLQ      = "kld-mean-ppl-q"
)

// label is one recognised summary line: its text (whitespace collapsed to single spaces), the
// key of its value and, when the line carries "± err", the key of the uncertainty.
type label struct {
	text, key, errKey string
}

// labels follow llama.cpp tools/perplexity/perplexity.cpp (kl_divergence and perplexity).
var labels = []label{
	{"Final estimate: PPL =", "ppl", "ppl_err"},
	{"Mean PPL(Q) :", "ppl_q", "ppl_q_err"},
	{"Mean PPL(base) :", "ppl_base", "ppl_base_err"},
	{"Cor(ln(PPL(Q)), ln(PPL(base))):", "ppl_cor_pct", ""},
	{"Mean ln(PPL(Q)/PPL(base)) :", "ln_ppl_ratio", "ln_ppl_ratio_err"},
	{"Mean PPL(Q)/PPL(base) :", "ppl_ratio", "ppl_ratio_err"},
	{"Mean PPL(Q)-PPL(base) :", "ppl_diff", "ppl_diff_err"},
	{"Mean KLD:", "mean", "mean_err"},
	{"Maximum KLD:", "max", ""},
	{"99.9% KLD:", "p99_9", ""},
	{"99.0% KLD:", "p99", ""},
	{"95.0% KLD:", "p95", ""},
	{"90.0% KLD:", "p90", ""},
	{"Median KLD:", "median", ""},
	{"10.0% KLD:", "p10", ""},
	{"5.0% KLD:", "p5", ""},
	{"1.0% KLD:", "p1", ""},
	{"0.1% KLD:", "p0_1", ""},
	{"Minimum KLD:", "min", ""},
	{"Mean Δp:", "mean_dp_pct", "mean_dp_pct_err"},
	{"RMS Δp :", "rms_dp_pct", "rms_dp_pct_err"},
	{"Same top p:", "same_top_p_pct", "same_top_p_pct_err"},
}

// KLDKeys lists the keys Scores.KLD may hold, in output order.
func KLDKeys() []string {
	var keys []string
	for _, l := range labels[1:] {
		keys = append(keys, l.key)
		if l.errKey != "" {
			keys = append(keys, l.errKey)
		}
	}
	return keys
}

// The parser's regular expressions, compiled on first use: every orkpipe command links this package,
// and a package-level MustCompile would compile them before main in every run (docs/performance-log.md,
// "Start-up and hashing, session 11").
var (
	ansiRe     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`) })
	chunkRe    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\[(\d{1,9})\][^\[\],\s]*,`) })
	kldChunkRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(\d{1,9}) \S+ ± `) })
)

// maxLine bounds the part of a line the parser looks at; llama-perplexity's per-chunk line can
// be long, but a summary line is short.
const maxLine = 64 << 10

// Parser parses llama-perplexity output line by line, so that a run's output can be parsed as it
// streams. The zero value is ready to use. Not safe for concurrent use.
type Parser struct {
	line      int
	vals      map[string]float64
	seenAt    map[string]int
	chunks    int
	kldHeader bool
	err       error
}

// ParseLine consumes one line (without its newline). The first malformed recognised line is
// remembered and returned by Result; later lines are still scanned.
func (p *Parser) ParseLine(raw string) {
	p.line++
	if len(raw) > maxLine {
		raw = raw[:maxLine]
	}
	if strings.IndexByte(raw, 0x1b) >= 0 {
		raw = ansiRe().ReplaceAllString(raw, "") // colored logs (llama.cpp --log-colors)
	}
	for _, m := range chunkRe().FindAllStringSubmatch(raw, -1) {
		if n, err := strconv.Atoi(m[1]); err == nil && n > p.chunks {
			p.chunks = n
		}
	}
	line := collapseSpaces(raw)
	if strings.HasPrefix(line, "chunk PPL ln(PPL(Q)/PPL(base))") {
		p.kldHeader = true
		return
	}
	if p.kldHeader {
		if m := kldChunkRe().FindStringSubmatch(line); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n > p.chunks {
				p.chunks = n
			}
			return
		}
	}
	for _, l := range labels {
		at := indexWord(line, l.text)
		if at < 0 {
			continue
		}
		p.record(l, line[at+len(l.text):])
		return
	}
}

func (p *Parser) fail(format string, a ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("%w: line %d: %s", ErrPerplexityOutput, p.line, fmt.Sprintf(format, a...))
	}
}

func (p *Parser) record(l label, rest string) {
	if prev, ok := p.seenAt[l.key]; ok {
		p.fail("%q repeats the value already given on line %d", l.text, prev)
		return
	}
	v, e, hasErr, err := parseValue(rest)
	if err != nil {
		p.fail("%q: %v", l.text, err)
		return
	}
	if p.vals == nil {
		p.vals, p.seenAt = map[string]float64{}, map[string]int{}
	}
	p.seenAt[l.key] = p.line
	p.vals[l.key] = v
	if hasErr {
		if l.errKey == "" {
			p.fail("%q: unexpected uncertainty", l.text)
			return
		}
		p.vals[l.errKey] = e
	}
	if (l.key == "ppl" || l.key == "ppl_q" || l.key == "ppl_base") && v <= 0 {
		p.fail("%q: perplexity %v is not positive", l.text, v)
	}
}

// Result returns the scores seen so far: nil when no perplexity or KL-divergence line was
// recognised, and an error wrapping ErrPerplexityOutput when a recognised line was malformed.
func (p *Parser) Result() (*Scores, error) {
	if p.err != nil {
		return nil, p.err
	}
	if len(p.vals) == 0 {
		return nil, nil
	}
	s := &Scores{Chunks: p.chunks}
	if v, ok := p.vals["ppl"]; ok {
		s.PPL, s.PPLErr, s.PPLSource = v, p.vals["ppl_err"], PPLFromFinalEstimate
	} else if v, ok := p.vals["ppl_q"]; ok {
		s.PPL, s.PPLErr, s.PPLSource = v, p.vals["ppl_q_err"], PPLFromMeanPPLQ
	}
	for k, v := range p.vals {
		if k == "ppl" || k == "ppl_err" {
			continue
		}
		if s.KLD == nil {
			s.KLD = map[string]float64{}
		}
		s.KLD[k] = v
	}
	return s, nil
}

// ParsePerplexity reads llama-perplexity output (stdout and stderr, in any interleaving) to EOF.
// It returns nil scores and no error when the output holds no perplexity at all.
func ParsePerplexity(r io.Reader) (*Scores, error) {
	var p Parser
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br)
		if line != "" || err == nil {
			p.ParseLine(line)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading llama-perplexity output: %w", err)
		}
	}
	return p.Result()
}

// readLine returns the next line without "\n" and "\r", keeping at most maxLine bytes of it.
func readLine(br *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(b) < maxLine {
			b = append(b, chunk[:min(len(chunk), maxLine-len(b))]...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		s := strings.TrimRight(string(b), "\r\n")
		return s, err
	}
}

// parseValue parses "X", "X%", "X ± Y", "X +/- Y" and "X ± Y %" (what follows a label).
func parseValue(rest string) (v, e float64, hasErr bool, err error) {
	rest = strings.ReplaceAll(rest, "+/-", "±")
	valText, errText, hasErr := strings.Cut(rest, "±")
	if v, err = parseNumber(valText); err != nil {
		return 0, 0, false, err
	}
	if hasErr {
		if e, err = parseNumber(errText); err != nil {
			return 0, 0, false, fmt.Errorf("uncertainty: %w", err)
		}
		if e < 0 {
			return 0, 0, false, fmt.Errorf("negative uncertainty %v", e)
		}
	}
	return v, e, hasErr, nil
}

// parseNumber takes the first field of s (a trailing "%" stripped) as a finite float.
func parseNumber(s string) (float64, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, fmt.Errorf("missing number")
	}
	text := strings.TrimSuffix(f[0], "%")
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return 0, fmt.Errorf("not a number: %q", f[0])
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("not finite: %q", f[0])
	}
	return v, nil
}

// collapseSpaces trims s and replaces every run of spaces and tabs by one space.
func collapseSpaces(s string) string {
	var b strings.Builder
	space := false
	for _, r := range strings.TrimSpace(s) {
		if r == ' ' || r == '\t' {
			space = true
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// indexWord finds text in line at the start or after a space (log prefixes such as
// "0.00.035.060 I " may precede a label).
func indexWord(line, text string) int {
	for off := 0; ; {
		i := strings.Index(line[off:], text)
		if i < 0 {
			return -1
		}
		at := off + i
		if at == 0 || line[at-1] == ' ' {
			return at
		}
		off = at + 1
	}
}

// Format renders s as llama-perplexity would print its summary (used by tests and fakes): the
// last chunk's entry, the final estimate (perplexity mode) and the KL-divergence statistics
// present. ParsePerplexity(Format(s)) equals s.
func (s *Scores) Format() string {
	var b strings.Builder
	if s.Chunks > 0 {
		fmt.Fprintf(&b, "[%d]%.4f,\n", s.Chunks, s.PPL) // the last chunk only: Chunks is the highest index
	}
	if s.PPLSource == PPLFromFinalEstimate {
		fmt.Fprintf(&b, "Final estimate: PPL = %s +/- %s\n", fmtFloat(s.PPL), fmtFloat(s.PPLErr))
	}
	for _, l := range labels[1:] {
		v, ok := s.KLD[l.key]
		if !ok {
			continue
		}
		if e, ok := s.KLD[l.errKey]; ok && l.errKey != "" {
			fmt.Fprintf(&b, "%s %s ± %s\n", l.text, fmtFloat(v), fmtFloat(e))
		} else {
			fmt.Fprintf(&b, "%s %s\n", l.text, fmtFloat(v))
		}
	}
	return b.String()
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
