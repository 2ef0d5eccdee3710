package results

import (
	"encoding/json"
	"math"
)

// ExtraPrediction is the key of Metrics.Extra under which a measured run keeps
// the analytic model's prediction of it (`sweep --predict`, `recommend
// --measure`), so one metrics.json holds predicted and measured side by side.
const ExtraPrediction = "prediction"

// Prediction is the analytic model's forecast stored beside a measurement.
// Zero figures are unknown.
type Prediction struct {
	TokensPerS            float64 `json:"tokens_per_s,omitempty"`
	TokensPerSPerRank     float64 `json:"tokens_per_s_per_rank,omitempty"`
	StepTimeS             float64 `json:"step_time_s,omitempty"`
	PeakMemAllocatedBytes int64   `json:"peak_mem_allocated_bytes,omitempty"`
	PeakMemReservedBytes  int64   `json:"peak_mem_reserved_bytes,omitempty"`
	PeakDeviceMemBytes    int64   `json:"peak_device_mem_bytes,omitempty"`
	// Host is true when the prediction is of host memory (the cpu profile): its
	// device peak then compares with a rank's RSS.
	Host     bool `json:"host,omitempty"`
	Feasible bool `json:"feasible"`
	// StepBreakdown is the predicted step's compute, collectives, exposed
	// communication and other (Source "sim"), beside the measured one
	// (Metrics.StepBreakdown); nil when the model gave none.
	StepBreakdown *StepBreakdown `json:"step_breakdown,omitempty"`
	// Calibration names the calibration file used; empty: uncalibrated.
	Calibration string `json:"calibration,omitempty"`
	// Extrapolates says where the run lies outside what the calibration was
	// fitted on (model size, nodes, sequence length); empty: inside, or
	// uncalibrated.
	Extrapolates string `json:"extrapolates,omitempty"`
	// Error is why there is no prediction (the model cannot predict the run).
	Error string `json:"error,omitempty"`
}

// StoredPrediction reads the prediction a measured run keeps in its extra; nil
// when it has none, or when what is there is not a prediction within the
// bounds every figure of a run has (a hand-edited file).
func (m *Metrics) StoredPrediction() *Prediction {
	v, ok := m.Extra[ExtraPrediction]
	if !ok {
		return nil
	}
	var p Prediction
	switch x := v.(type) {
	case Prediction:
		p = x
	case *Prediction:
		if x == nil {
			return nil
		}
		p = *x
	default:
		b, err := json.Marshal(x)
		if err != nil || json.Unmarshal(b, &p) != nil {
			return nil
		}
	}
	for _, f := range []float64{p.TokensPerS, p.TokensPerSPerRank} {
		if !(f >= 0 && f <= MaxTokensPerS) {
			return nil
		}
	}
	if !(p.StepTimeS >= 0 && p.StepTimeS <= MaxStepTimeS) {
		return nil
	}
	for _, b := range []int64{p.PeakMemAllocatedBytes, p.PeakMemReservedBytes, p.PeakDeviceMemBytes} {
		if b < 0 || b > MaxMemBytes {
			return nil
		}
	}
	if b := p.StepBreakdown; b != nil {
		if f, _ := b.Check(); f != "" {
			return nil
		}
	}
	return &p
}

// relErr is predicted / measured − 1; nil when either is unknown.
func relErr(pred, meas float64) *float64 {
	if !(pred > 0) || !(meas > 0) || math.IsInf(pred, 0) || math.IsInf(meas, 0) {
		return nil
	}
	return F64(pred/meas - 1)
}

// MemoryPair picks the memory figures a prediction and a measurement both
// have, the closest to what a device holds first: NVML's device peak, then
// reserved, then allocated; on the cpu profile a rank's RSS against the
// predicted host peak when no allocation figure is measured. what names the
// figure; ok is false when there is no pair.
func MemoryPair(p *Prediction, m *Metrics) (pred, meas int64, what string, ok bool) {
	get := func(x *int64) int64 {
		if x == nil {
			return 0
		}
		return *x
	}
	for _, c := range []struct {
		what       string
		pred, meas int64
	}{
		{SamplePeakDevice, p.PeakDeviceMemBytes, get(m.PeakDeviceMemBytes)},
		{SamplePeakReserved, p.PeakMemReservedBytes, get(m.PeakMemReservedBytes)},
		{SamplePeakAllocated, p.PeakMemAllocatedBytes, get(m.PeakMemAllocatedBytes)},
	} {
		if c.pred > 0 && c.meas > 0 {
			return c.pred, c.meas, c.what, true
		}
	}
	if p.Host && p.PeakDeviceMemBytes > 0 && get(m.PeakRSSBytes) > 0 {
		return p.PeakDeviceMemBytes, *m.PeakRSSBytes, SamplePeakRSS, true
	}
	return 0, 0, "", false
}

// predictionOf returns the run's stored prediction when it is a measured, ok run.
func predictionOf(r *Run) *Prediction {
	if r.Metrics.Predicted || r.Metrics.Status != StatusOK {
		return nil
	}
	return r.Metrics.StoredPrediction()
}

// predictedColumns show a stored prediction and its error: what `sweep
// --predict` adds to a measured run. They are looked up by name (report
// --metric, compare --metric, gate rules) but stay out of Columns, so exports
// of runs without predictions keep their columns.
var predictedColumns = []Column{
	{Name: "predicted.tokens_per_s_per_rank", Kind: KindMetric, Header: "pred tokens/s/rank", Unit: UnitRate,
		Doc: "the analytic model's tokens/s/rank for this run (sweep --predict)",
		get: func(r *Run) any {
			if p := predictionOf(r); p != nil && p.TokensPerSPerRank > 0 {
				return p.TokensPerSPerRank
			}
			return nil
		}},
	{Name: "pred_err.tokens_per_s_per_rank", Kind: KindMetric, Header: "tokens/s err (%)", Unit: UnitFraction,
		Doc: "predicted / measured tokens/s/rank − 1 (sweep --predict)",
		get: func(r *Run) any {
			p := predictionOf(r)
			if p == nil || r.Metrics.TokensPerSPerRank == nil {
				return nil
			}
			return optF(relErr(p.TokensPerSPerRank, *r.Metrics.TokensPerSPerRank))
		}},
	{Name: "predicted.peak_mem_bytes", Kind: KindMetric, Header: "pred peak", Unit: UnitBytes,
		Doc: "the analytic model's peak memory of the figure pred_err.peak_mem_bytes compares (sweep --predict)",
		get: func(r *Run) any {
			p := predictionOf(r)
			if p == nil {
				return nil
			}
			if pred, _, _, ok := MemoryPair(p, &r.Metrics); ok {
				return pred
			}
			return nil
		}},
	{Name: "pred_err.peak_mem_bytes", Kind: KindMetric, Header: "memory err (%)", Unit: UnitFraction,
		Doc: "predicted / measured peak memory − 1, of the figure both have: device (NVML), else reserved, else allocated, else (cpu) RSS",
		get: func(r *Run) any {
			p := predictionOf(r)
			if p == nil {
				return nil
			}
			if pred, meas, _, ok := MemoryPair(p, &r.Metrics); ok {
				return optF(relErr(float64(pred), float64(meas)))
			}
			return nil
		}},
	{Name: "predicted.exposed_comm_s", Kind: KindMetric, Header: "pred exposed comm (s)", Unit: UnitSeconds,
		Doc: "the analytic model's exposed communication per step for this run (sweep --predict)",
		get: func(r *Run) any {
			if p := predictionOf(r); p != nil && p.StepBreakdown != nil {
				return p.StepBreakdown.ExposedCommS
			}
			return nil
		}},
	{Name: "predicted.exposed_comm_share", Kind: KindMetric, Header: "pred exposed comm (%)", Unit: UnitFraction,
		Doc: "the analytic model's exposed communication as a share of its step (sweep --predict)",
		get: func(r *Run) any {
			if p := predictionOf(r); p != nil {
				return optF(p.StepBreakdown.ExposedShare())
			}
			return nil
		}},
	{Name: "pred_err.exposed_comm_s", Kind: KindMetric, Header: "exposed comm err (%)", Unit: UnitFraction,
		Doc: "predicted / measured exposed communication per step − 1 (sweep --predict)",
		get: func(r *Run) any {
			p := predictionOf(r)
			if p == nil || p.StepBreakdown == nil || r.Metrics.StepBreakdown == nil {
				return nil
			}
			return optF(relErr(p.StepBreakdown.ExposedCommS, r.Metrics.StepBreakdown.ExposedCommS))
		}},
}

// predictedIndex maps a predicted column's name to its index + 1.
var predictedIndex = func() map[string]int {
	m := map[string]int{}
	for i, c := range predictedColumns {
		m[c.Name] = i + 1
	}
	return m
}()

// predictedColumn returns the predicted column named name (the zero Column when
// there is none).
func predictedColumn(name string) Column {
	if i := predictedIndex[name]; i > 0 {
		return predictedColumns[i-1]
	}
	return Column{}
}
