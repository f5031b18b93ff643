package model

import (
	"context"
	"fmt"
	"math"
	"slices"
)

// KLReport holds the statistics llama-perplexity --kl-divergence prints (llama.cpp 3f545bec,
// kl_divergence()), for the evaluated model Q against the base model whose log-probabilities a
// KL-divergence base file holds. Errors (…Err) are the standard errors llama.cpp prints after "±";
// where rounding makes a variance negative or a denominator zero (Q and base agreeing almost exactly)
// llama.cpp prints nan and this reports 0, so every field is a finite number.
type KLReport struct {
	Chunks int `json:"chunks"`
	Ctx    int `json:"ctx"`
	Scored int `json:"scored"`

	PPL           float64 `json:"ppl"` // Mean PPL(Q)
	PPLErr        float64 `json:"ppl_err"`
	PPLBase       float64 `json:"ppl_base"` // Mean PPL(base)
	PPLBaseErr    float64 `json:"ppl_base_err"`
	LnPPLCor      float64 `json:"ln_ppl_cor"`   // Cor(ln(PPL(Q)), ln(PPL(base))), a fraction
	LnPPLRatio    float64 `json:"ln_ppl_ratio"` // Mean ln(PPL(Q)/PPL(base))
	LnPPLRatioErr float64 `json:"ln_ppl_ratio_err"`
	PPLRatio      float64 `json:"ppl_ratio"` // Mean PPL(Q)/PPL(base)
	PPLRatioErr   float64 `json:"ppl_ratio_err"`
	PPLDiff       float64 `json:"ppl_diff"` // Mean PPL(Q)-PPL(base)
	PPLDiffErr    float64 `json:"ppl_diff_err"`

	KLD         Distribution `json:"kld"`         // KL(base || Q) per scored token, in nats
	DeltaP      Distribution `json:"delta_p"`     // p_Q(next token) − p_base(next token), a fraction
	DeltaPRMS   float64      `json:"delta_p_rms"` // RMS Δp
	DeltaPRMSEr float64      `json:"delta_p_rms_err"`
	SameTop     float64      `json:"same_top"` // fraction of positions where both argmaxes agree
	SameTopErr  float64      `json:"same_top_err"`
}

// Distribution summarises per-token values as llama-perplexity does: mean ± its standard error, and
// percentiles of the values (float32, linear interpolation; the median of an even count is the mean
// of the two middle values).
type Distribution struct {
	Mean    float64 `json:"mean"`
	MeanErr float64 `json:"mean_err"`
	Max     float64 `json:"max"`
	P999    float64 `json:"p99_9"`
	P99     float64 `json:"p99"`
	P95     float64 `json:"p95"`
	P90     float64 `json:"p90"`
	P75     float64 `json:"p75,omitempty"` // Δp only
	Median  float64 `json:"median"`
	P25     float64 `json:"p25,omitempty"` // Δp only
	P10     float64 `json:"p10"`
	P5      float64 `json:"p5"`
	P1      float64 `json:"p1"`
	P01     float64 `json:"p0_1"`
	Min     float64 `json:"min"`
}

// klSums are llama.cpp's kl_divergence_result accumulators.
type klSums struct {
	nll, nll2, nllBase, nllBase2, nllNllBase, kld, kld2, pDiff, pDiff2, pDiff4 float64
	sameTop, count                                                             int
}

// EvaluateKLBase evaluates m on the chunks of base as llama-perplexity --kl-divergence does: text is
// the tokenization of the evaluated text, whose first NChunk·Ctx tokens must be base's tokens (a file
// made from another text or tokenizer is refused); each chunk runs from position 0 with its first
// token replaced by bos (unless NoToken), and every scored position contributes the KL divergence
// of the base distribution to m's, Δp of the next token and whether the argmaxes agree. maxChunks > 0
// limits the chunks. progress, when not nil, is called after each step, as EvalOptions.Progress.
func EvaluateKLBase(ctx context.Context, m *Model, base *KLBase, text []int32, bos int32, maxChunks int, progress func(done, total int)) (*KLReport, error) {
	if base.NVocab != m.Cfg.NVocab {
		return nil, fmt.Errorf("KL-divergence base %s: n_vocab %d, the model has %d: %w", base.Path, base.NVocab, m.Cfg.NVocab, ErrBadKLBase)
	}
	if len(text) < len(base.Tokens) {
		return nil, fmt.Errorf("KL-divergence base %s: tokens: %d (n_chunk %d × n_ctx %d), the text has only %d: %w",
			base.Path, len(base.Tokens), base.NChunk, base.Ctx, len(text), ErrBadKLBase)
	}
	for i, t := range base.Tokens {
		if text[i] != t {
			return nil, fmt.Errorf("KL-divergence base %s: tokens[%d] = %d, the text's token %d is %d (made from another text or tokenizer): %w",
				base.Path, i, t, i, text[i], ErrBadKLBase)
		}
	}
	chunks := base.NChunk
	if maxChunks > 0 {
		chunks = min(chunks, maxChunks)
	}
	n, nv, first := base.Ctx, m.Cfg.NVocab, base.Ctx/2
	rows := make([]KLRow, base.Rows())
	buf := make([]byte, base.Rows()*base.RowValues()*2)
	var s klSums
	var klds, pdiffs []float32
	setTokens := func(c int, dst []int32) {
		copy(dst, base.Tokens[c*n:(c+1)*n])
		if bos != NoToken {
			dst[0] = bos
		}
	}
	err := forEachChunk(ctx, []evalModel{{m: m}}, chunks, n, setTokens, func(c int, out [][]float32) error {
		if err := base.ReadChunk(c, rows, buf); err != nil {
			return err
		}
		logits := out[0]
		for j := first; j < n-1; j++ {
			kl, pd := s.add(logits[j*nv:(j+1)*nv], &rows[j-first], int(base.Tokens[c*n+j+1]))
			klds, pdiffs = append(klds, kl), append(pdiffs, pd)
		}
		return nil
	}, progress)
	if err != nil {
		return nil, err
	}
	return s.report(chunks, n, klds, pdiffs), nil
}

// add accumulates one scored position exactly as llama.cpp's log_softmax(n_vocab, logits,
// base_log_prob, tok, kld) does (float32 arithmetic where it uses float, sums in float64), and returns
// its KL divergence and Δp.
func (s *klSums) add(logits []float32, base *KLRow, tok int) (float32, float32) {
	maxLogit, imax := logits[0], 0
	for i, v := range logits[1:] {
		if v > maxLogit {
			maxLogit, imax = v, i+1
		}
	}
	var sumExp float64
	for _, v := range logits {
		sumExp += float64(expf32(v - maxLogit))
	}
	logSumExp := float32(math.Log(sumExp))
	nll := maxLogit + logSumExp - logits[tok]
	s.nll += float64(nll)
	s.nll2 += float64(nll * nll)
	nllBase := -base.LogProb(tok)
	s.nllBase += float64(nllBase)
	s.nllBase2 += float64(nllBase * nllBase)
	s.nllNllBase += float64(nll * nllBase)
	maxLogit += logSumExp
	var sum float64
	imaxBase, pMax := -1, float32(0)
	for i, v := range logits {
		pl := base.LogProb(i)
		if i == 0 || pl > pMax {
			pMax, imaxBase = pl, i
		}
		if pl > -16 {
			sum += float64(expf32(pl) * (pl - v + maxLogit))
		}
	}
	s.kld += sum
	s.kld2 += sum * sum
	s.count++
	if imax == imaxBase {
		s.sameTop++
	}
	pDiff := expf32(-nll) - expf32(-nllBase)
	s.pDiff += float64(pDiff)
	d2 := float64(pDiff * pDiff)
	s.pDiff2 += d2
	s.pDiff4 += d2 * d2
	return float32(sum), pDiff
}

// expf32 is C's expf to float32 rounding.
func expf32(x float32) float32 { return float32(math.Exp(float64(x))) }

// meanAndUncertainty is llama.cpp's mean_and_uncertainty: the mean, and the standard error when the
// variance is positive and there are more than 10 values.
func meanAndUncertainty(sum, sum2 float64, count int) (float64, float64) {
	if count < 1 {
		return 0, 0
	}
	f := sum / float64(count)
	df := sum2/float64(count) - f*f
	if df > 0 && count > 10 {
		return f, math.Sqrt(df / float64(count-1))
	}
	return f, 0
}

func (s *klSums) report(chunks, ctx int, klds, pdiffs []float32) *KLReport {
	r := &KLReport{Chunks: chunks, Ctx: ctx, Scored: s.count}
	lp, lpErr := meanAndUncertainty(s.nll, s.nll2, s.count)
	r.PPL = math.Exp(lp)
	r.PPLErr = r.PPL * lpErr
	lb, lbErr := meanAndUncertainty(s.nllBase, s.nllBase2, s.count)
	r.PPLBase = math.Exp(lb)
	r.PPLBaseErr = r.PPLBase * lbErr
	cov := 0.0
	if s.count >= 10 {
		n := float64(s.count)
		cov = (s.nllNllBase/n - (s.nll/n)*(s.nllBase/n)) / (n - 1)
	}
	if lpErr*lbErr > 0 {
		r.LnPPLCor = cov / (lpErr * lbErr)
	}
	r.LnPPLRatio = lp - lb
	r.LnPPLRatioErr = sqrtNonNeg(lpErr*lpErr + lbErr*lbErr - 2*cov)
	r.PPLRatio = math.Exp(r.LnPPLRatio)
	r.PPLRatioErr = r.PPLRatio * r.LnPPLRatioErr
	r.PPLDiff = r.PPL - r.PPLBase
	r.PPLDiffErr = sqrtNonNeg(r.PPLErr*r.PPLErr + r.PPLBaseErr*r.PPLBaseErr - 2*r.PPL*r.PPLBase*cov)
	r.KLD.Mean, r.KLD.MeanErr = meanAndUncertainty(s.kld, s.kld2, s.count)
	r.KLD.percentiles(klds, false)
	r.DeltaP.Mean, r.DeltaP.MeanErr = meanAndUncertainty(s.pDiff, s.pDiff2, s.count)
	r.DeltaP.percentiles(pdiffs, true)
	mse, mseErr := meanAndUncertainty(s.pDiff2, s.pDiff4, s.count)
	r.DeltaPRMS = math.Sqrt(mse)
	if r.DeltaPRMS > 0 {
		r.DeltaPRMSEr = 0.5 / r.DeltaPRMS * mseErr
	}
	if s.count > 0 {
		r.SameTop = float64(s.sameTop) / float64(s.count)
	}
	if s.count > 1 {
		r.SameTopErr = math.Sqrt(r.SameTop * (1 - r.SameTop) / float64(s.count-1))
	}
	return r
}

// sqrtNonNeg is the square root of a variance that rounding may have made slightly negative (when Q
// and base agree almost exactly): 0 there, where llama-perplexity prints nan.
func sqrtNonNeg(v float64) float64 { return math.Sqrt(max(v, 0)) }

// percentiles fills the order statistics of v as llama-perplexity computes them (quartiles for Δp).
func (d *Distribution) percentiles(v []float32, quartiles bool) {
	if len(v) == 0 {
		return
	}
	v = slices.Clone(v)
	slices.Sort(v)
	pc := func(fraction float32) float64 { // llama.cpp's percentile(), in float32
		if fraction <= 0 {
			return float64(v[0])
		}
		if fraction >= 1 {
			return float64(v[len(v)-1])
		}
		p := fraction * float32(len(v)-1)
		ip := int(p)
		p -= float32(ip)
		return float64((1-p)*v[ip] + p*v[min(ip+1, len(v)-1)])
	}
	d.Max, d.Min = float64(v[len(v)-1]), float64(v[0])
	d.P999, d.P99, d.P95, d.P90 = pc(0.999), pc(0.990), pc(0.950), pc(0.900)
	d.P10, d.P5, d.P1, d.P01 = pc(0.100), pc(0.050), pc(0.010), pc(0.001)
	if quartiles {
		d.P75, d.P25 = pc(0.750), pc(0.250)
	}
	if len(v)%2 == 0 {
		d.Median = float64(0.5 * (v[len(v)/2] + v[len(v)/2-1]))
	} else {
		d.Median = float64(v[len(v)/2])
	}
}
