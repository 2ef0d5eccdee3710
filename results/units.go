package results

import (
	"math"
	"strconv"
)

// ByteUnit is a unit byte figures are shown in: KiB, MiB or GiB. Tables, gates,
// plots and progress lines all pick it with ByteUnitFor, so a CPU run's 40 MiB
// never reads 0.00 GiB and an H100's 70 GiB never reads 71680 MiB.
type ByteUnit struct {
	Name  string  // "KiB", "MiB" or "GiB"
	Scale float64 // bytes per unit
}

// Byte units, smallest first.
var (
	KiB = ByteUnit{"KiB", 1 << 10}
	MiB = ByteUnit{"MiB", 1 << 20}
	GiB = ByteUnit{"GiB", 1 << 30}
)

// ByteUnitFor picks the unit a set of byte figures reads best in: the largest
// unit the biggest of them (maxBytes, in magnitude) is at least one of, so it
// shows 1 to 1023 units; KiB for anything under 1 MiB, zero included.
func ByteUnitFor(maxBytes float64) ByteUnit {
	a := math.Abs(maxBytes)
	switch {
	case a >= GiB.Scale:
		return GiB
	case a >= MiB.Scale:
		return MiB
	}
	return KiB
}

// Format shows bytes in u with three significant figures ("5.81", "58.1", "581";
// "1023" stays whole). A figure far below the unit (a small run in a column of
// large ones) keeps at most three decimals and reads "<0.001" rather than a 0
// that would claim nothing was used.
func (u ByteUnit) Format(bytes float64) string {
	return threeFigures(bytes / u.Scale)
}

// WithName is Format followed by the unit's name: "412 MiB".
func (u ByteUnit) WithName(bytes float64) string {
	return u.Format(bytes) + " " + u.Name
}

// FormatBytes shows one byte figure in the unit that suits it, named: "412 MiB".
func FormatBytes(bytes float64) string {
	return ByteUnitFor(bytes).WithName(bytes)
}

// threeFigures formats x with three significant figures, never in exponent form
// and with at most three decimals.
func threeFigures(x float64) string {
	a := math.Abs(x)
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return strconv.FormatFloat(x, 'g', -1, 64)
	case x == 0:
		return "0"
	case a >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a < 0.0005:
		if x < 0 {
			return "-<0.001"
		}
		return "<0.001"
	}
	decimals := min(3, 2-int(math.Floor(math.Log10(a))))
	s := strconv.FormatFloat(x, 'f', decimals, 64)
	// Rounding can carry into another digit (9.996 → "10.00"): one decimal fewer.
	if r, _ := strconv.ParseFloat(s, 64); decimals > 0 && math.Abs(r) >= 10*math.Pow(10, math.Floor(math.Log10(a))) {
		s = strconv.FormatFloat(x, 'f', decimals-1, 64)
	}
	return s
}

// bytesColumn reports whether tables show c's figures in a byte unit.
func bytesColumn(c *Column) bool {
	return c.Unit == UnitBytes || c.Unit == UnitBytesMiB
}

// byteUnitOf is the unit column c is shown in for runs: that of its largest
// figure among the runs whose cells show a figure (ok runs, and every run for a
// text column); GiB when there is none (the header still names a unit).
func byteUnitOf(c *Column, runs []Run) ByteUnit {
	top, found := 0.0, false
	for i := range runs {
		if runs[i].Metrics.Status != StatusOK && !c.text {
			continue
		}
		if v, ok := numberOf(c.Value(&runs[i])); ok {
			top, found = math.Max(top, math.Abs(v)), true
		}
	}
	if !found {
		return GiB
	}
	return ByteUnitFor(top)
}

// byteUnitOfValues is the unit of a set of byte figures: that of the largest;
// GiB when there is none.
func byteUnitOfValues(vals []float64) ByteUnit {
	if len(vals) == 0 {
		return GiB
	}
	top := 0.0
	for _, v := range vals {
		top = math.Max(top, math.Abs(v))
	}
	return ByteUnitFor(top)
}

// numberOf is v as a float, when it is a number.
func numberOf(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// headerIn is c's table heading with unit u for a byte column: "peak reserved (MiB)".
func headerIn(c *Column, u ByteUnit) string {
	if !bytesColumn(c) {
		return c.Header
	}
	return c.Header + " (" + u.Name + ")"
}
