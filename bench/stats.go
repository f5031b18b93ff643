package main

import (
	"errors"
	"math"
	"sort"
)

// Stats summarizes the samples of one measurement (seconds).
type Stats struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// Spread is (max - min) / median: the relative width of what was seen.
	Spread float64 `json:"spread"`
}

// Summarize returns the median, extremes and relative spread of xs. An empty xs gives N == 0.
func Summarize(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	st := Stats{N: len(s), Min: s[0], Max: s[len(s)-1]}
	if len(s)%2 == 1 {
		st.Median = s[len(s)/2]
	} else {
		st.Median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	if st.Median > 0 {
		st.Spread = (st.Max - st.Min) / st.Median
	}
	return st
}

// Ratio is subject / baseline of two medians; 0 when either is missing or not positive.
func Ratio(subject, baseline Stats) float64 {
	if subject.N == 0 || baseline.N == 0 || subject.Median <= 0 || baseline.Median <= 0 {
		return 0
	}
	return subject.Median / baseline.Median
}

// Fit is a least-squares line y = Slope*x + Intercept with its coefficient of determination.
type Fit struct {
	Slope     float64 `json:"slope"`
	Intercept float64 `json:"intercept"`
	R2        float64 `json:"r2"`
	N         int     `json:"n"`
}

// LinearFit fits y = a*x + b by least squares. It needs at least two distinct x. R2 is 1 when y
// is constant and exactly fitted.
func LinearFit(x, y []float64) (Fit, error) {
	if len(x) != len(y) {
		return Fit{}, errors.New("linear fit: x and y differ in length")
	}
	n := float64(len(x))
	if len(x) < 2 {
		return Fit{}, errors.New("linear fit: need at least two points")
	}
	var sx, sy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
	}
	mx, my := sx/n, sy/n
	var sxx, sxy, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		return Fit{}, errors.New("linear fit: all x are equal")
	}
	f := Fit{Slope: sxy / sxx, N: len(x)}
	f.Intercept = my - f.Slope*mx
	var sse float64
	for i := range x {
		r := y[i] - (f.Slope*x[i] + f.Intercept)
		sse += r * r
	}
	switch {
	case syy > 0:
		f.R2 = 1 - sse/syy
	case sse <= 1e-18*math.Max(1, my*my):
		f.R2 = 1
	}
	return f, nil
}
