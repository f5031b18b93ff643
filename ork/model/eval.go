package model

import (
	"context"
	"fmt"
	"math"
	"sort"
)

// EvalOptions configures Evaluate.
type EvalOptions struct {
	// Ctx is the chunk length in tokens (llama-perplexity's -c). Required, at least 4.
	Ctx int
	// MaxChunks limits the number of chunks (0: all, i.e. tokens / Ctx).
	MaxChunks int
	// BOS, when not NoToken, replaces the first token of every chunk (llama-perplexity does this when
	// the vocabulary adds BOS).
	BOS int32
	// Base, when set, is the reference model for KL divergence and same-top-token rate (the float model).
	Base *Model
	// BaseObserver, when set with Base, sees the base model's forward passes (ForwardObserved): the
	// screen stage counts the float model's routing of the text with it.
	BaseObserver Observer
	// Progress, when set, is called after each step of the evaluation, done of total: a block of a
	// model run on a group of chunks (EvalGroupChunks), or a chunk scored.
	Progress func(done, total int)
}

// KLDStats summarises the per-token KL divergence KL(base || evaluated) over the scored tokens.
type KLDStats struct {
	Mean    float64 `json:"mean"`
	MeanErr float64 `json:"mean_err"`
	Median  float64 `json:"median"`
	P99     float64 `json:"p99"`
	Max     float64 `json:"max"`
}

// EvalResult is what Evaluate measures.
type EvalResult struct {
	PPL    float64 `json:"ppl"`
	PPLErr float64 `json:"ppl_err"`
	Chunks int     `json:"chunks"`
	// Tokens is the number of tokens of the text (BOS included); Scored those whose probability counted.
	Tokens int `json:"tokens"`
	Scored int `json:"scored"`
	// BasePPL and BasePPLErr are the base model's perplexity and its error over the same scored tokens,
	// from the same forward passes the KL divergence reads (set only with a base model): what Evaluate of
	// the base model alone gives, bit for bit, without running it again.
	BasePPL    float64 `json:"base_ppl,omitempty"`
	BasePPLErr float64 `json:"base_ppl_err,omitempty"`
	// KLD and SameTop are set only with a base model.
	KLD        *KLDStats `json:"kld,omitempty"`
	SameTop    *float64  `json:"same_top,omitempty"`
	SameTopErr *float64  `json:"same_top_err,omitempty"`
	// KLDPercentiles is the distribution of the per-token KL divergence (with a base model): the
	// value at 0, 1, ..., 100 percent of the scored tokens (101 values, interpolated as KLD.Median
	// and KLD.P99 are; [0] the minimum, [100] the maximum). Not part of the JSON form.
	KLDPercentiles []float64 `json:"-"`
}

// Evaluate computes perplexity over tokens the way llama.cpp's llama-perplexity does (b4747,
// perplexity()): n_chunk = len(tokens) / Ctx chunks of Ctx consecutive tokens; in each chunk the first
// token is replaced by BOS, the chunk is run from position 0, and the tokens at positions
// Ctx/2+1 .. Ctx-1 are scored by the logits of the position before. PPL = exp(mean NLL) and its error
// exp(mean)·sqrt((mean(NLL²) − mean²)/(n−1)). With opts.Base, each scored position also contributes
// KL(p_base || p) and whether both argmaxes agree (llama-perplexity's --kl-divergence), and the base
// model's own NLL (BasePPL).
func Evaluate(ctx context.Context, m *Model, tokens []int32, opts EvalOptions) (EvalResult, error) {
	var res EvalResult
	n := opts.Ctx
	if n < 4 {
		return res, fmt.Errorf("context length %d: want at least 4", n)
	}
	if opts.Base != nil && opts.Base.Cfg.NVocab != m.Cfg.NVocab {
		return res, fmt.Errorf("base model has %d tokens, evaluated model %d: %w", opts.Base.Cfg.NVocab, m.Cfg.NVocab, ErrBadModel)
	}
	chunks := EvalChunks(len(tokens), n, opts.MaxChunks)
	if len(tokens) < 2*n {
		return res, fmt.Errorf("%d tokens, need at least 2·ctx = %d: %w", len(tokens), 2*n, ErrTooShort)
	}
	first := n / 2
	nv := m.Cfg.NVocab
	var nll, nll2, baseNLL, baseNLL2, kldSum, kld2Sum float64
	var klds []float64
	sameTop, count := 0, 0
	lp := make([]float64, nv)
	lpBase := make([]float64, nv)
	models := []evalModel{{m: m}}
	if opts.Base != nil {
		models = append(models, evalModel{m: opts.Base, obs: opts.BaseObserver})
	}
	setTokens := func(c int, dst []int32) {
		copy(dst, tokens[c*n:(c+1)*n])
		if opts.BOS != NoToken {
			dst[0] = opts.BOS
		}
	}
	err := forEachChunk(ctx, models, chunks, n, setTokens, func(c int, out [][]float32) error {
		logits := out[0]
		var base []float32
		if opts.Base != nil {
			base = out[1]
		}
		for j := first; j < n-1; j++ {
			target := tokens[c*n+j+1]
			row := logits[j*nv : (j+1)*nv]
			top := logSoftmax(lp, row)
			v := -lp[target]
			nll += v
			nll2 += v * v
			count++
			if base != nil {
				btop := logSoftmax(lpBase, base[j*nv:(j+1)*nv])
				bv := -lpBase[target]
				baseNLL += bv
				baseNLL2 += bv * bv
				var kl float64
				for i, b := range lpBase {
					if pb := math.Exp(b); pb > 0 {
						kl += pb * (b - lp[i])
					}
				}
				kldSum += kl
				kld2Sum += kl * kl
				klds = append(klds, kl)
				if top == btop {
					sameTop++
				}
			}
		}
		return nil
	}, opts.Progress)
	if err != nil {
		return res, err
	}
	res.Chunks, res.Tokens, res.Scored = chunks, len(tokens), count
	res.PPL, res.PPLErr = perplexity(nll, nll2, count)
	if opts.Base != nil {
		res.BasePPL, res.BasePPLErr = perplexity(baseNLL, baseNLL2, count)
		k := &KLDStats{Mean: kldSum / float64(count)}
		if v := kld2Sum/float64(count) - k.Mean*k.Mean; v > 0 && count > 1 {
			k.MeanErr = math.Sqrt(v / float64(count-1))
		}
		sort.Float64s(klds)
		k.Median = percentile(klds, 0.5)
		k.P99 = percentile(klds, 0.99)
		k.Max = klds[len(klds)-1]
		res.KLDPercentiles = make([]float64, 101)
		for i := range res.KLDPercentiles {
			res.KLDPercentiles[i] = percentile(klds, float64(i)/100)
		}
		res.KLD = k
		st := float64(sameTop) / float64(count)
		se := 0.0
		if count > 1 {
			se = math.Sqrt(st * (1 - st) / float64(count-1))
		}
		res.SameTop, res.SameTopErr = &st, &se
	}
	return res, nil
}

// perplexity returns exp(mean NLL) and its error exp(mean)·sqrt((mean(NLL²) − mean²)/(n−1)) from the
// sums of count tokens' NLL and NLL².
func perplexity(nll, nll2 float64, count int) (ppl, pplErr float64) {
	mean := nll / float64(count)
	ppl = math.Exp(mean)
	if v := nll2/float64(count) - mean*mean; v > 0 && count > 1 {
		pplErr = math.Sqrt(v/float64(count-1)) * ppl
	}
	return ppl, pplErr
}

// perplexityUbatch is the number of tokens of each sequence in each ubatch when llama-perplexity (with
// its defaults -b 2048 -ub 512) evaluates chunk c of n chunks of ctx tokens of a model with recurrent
// blocks: it decodes n_seq = max(1, 2048/ctx) chunks at once as parallel sequences, and llama.cpp
// splits a decode of S sequences into ubatches of floor(512/S) tokens of each (split_equal; decodes
// of a longer chunk are 2048 tokens, ubatches of 512).
func perplexityUbatch(ctx, c, n int) int {
	nseq := max(1, 2048/ctx)
	s := min(nseq, n-c/nseq*nseq)
	return 512 / s
}

// logSoftmax writes log-probabilities of logits into dst (float64, as llama.cpp's log_softmax) and
// returns the index of the largest logit.
func logSoftmax(dst []float64, logits []float32) int {
	top := 0
	mx := logits[0]
	for i, v := range logits {
		if v > mx {
			mx, top = v, i
		}
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v - mx))
	}
	ls := math.Log(sum)
	for i, v := range logits {
		dst[i] = float64(v-mx) - ls
	}
	return top
}

// percentile interpolates linearly between the sorted values, as llama-perplexity's KLD report does.
func percentile(sorted []float64, fraction float64) float64 {
	if fraction <= 0 {
		return sorted[0]
	}
	if fraction >= 1 {
		return sorted[len(sorted)-1]
	}
	p := fraction * float64(len(sorted)-1)
	ip := int(p)
	p -= float64(ip)
	return (1-p)*sorted[ip] + p*sorted[min(ip+1, len(sorted)-1)]
}
