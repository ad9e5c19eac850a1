package experiments

import (
	"math"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Welch is Welch's t-test of two conditions' transfer times, as the
// thesis compared its overhead vectors (§5.8, R's t.test): the difference
// of B's mean from A's with its confidence interval, in seconds and in
// percent of A's mean.
type Welch struct {
	A          string  `json:"a"`
	B          string  `json:"b"`
	MeanA      float64 `json:"mean_a_s"`
	MeanB      float64 `json:"mean_b_s"`
	DiffS      float64 `json:"diff_s"` // mean B − mean A
	CILowS     float64 `json:"ci_low_s"`
	CIHighS    float64 `json:"ci_high_s"`
	DiffPct    float64 `json:"diff_pct"`
	CILowPct   float64 `json:"ci_low_pct"`
	CIHighPct  float64 `json:"ci_high_pct"`
	Confidence float64 `json:"confidence"`
	T          float64 `json:"t"`
	DF         float64 `json:"df"`
	P          float64 `json:"p"`
	// Distinguishable: the interval excludes 0.
	Distinguishable bool `json:"distinguishable"`
}

type moments struct{ mean, variance float64 }

// meanVar is the mean and the sample variance (n−1) of xs.
func meanVar(xs []float64) moments {
	if len(xs) < 2 {
		if len(xs) == 1 {
			return moments{mean: xs[0]}
		}
		return moments{}
	}
	m, v := stat.MeanVariance(xs, nil)
	return moments{m, v}
}

// welch compares b with a at the given confidence (0.99: the thesis's).
func welch(aName, bName string, a, b []float64, confidence float64) Welch {
	ma, mb := meanVar(a), meanVar(b)
	na, nb := float64(len(a)), float64(len(b))
	w := Welch{A: aName, B: bName, MeanA: ma.mean, MeanB: mb.mean, DiffS: mb.mean - ma.mean, Confidence: confidence}
	va, vb := ma.variance/na, mb.variance/nb
	se := math.Sqrt(va + vb)
	if len(a) < 2 || len(b) < 2 || se == 0 {
		w.P = math.NaN()
		return w
	}
	// Welch–Satterthwaite degrees of freedom.
	w.DF = (va + vb) * (va + vb) / (va*va/(na-1) + vb*vb/(nb-1))
	w.T = w.DiffS / se
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: w.DF}
	w.P = 2 * t.CDF(-math.Abs(w.T))
	q := t.Quantile(1 - (1-confidence)/2)
	w.CILowS, w.CIHighS = w.DiffS-q*se, w.DiffS+q*se
	if ma.mean != 0 {
		w.DiffPct, w.CILowPct, w.CIHighPct = 100*w.DiffS/ma.mean, 100*w.CILowS/ma.mean, 100*w.CIHighS/ma.mean
	}
	w.Distinguishable = w.CILowS > 0 || w.CIHighS < 0
	return w
}
