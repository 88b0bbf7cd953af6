package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Result is one row of the report. Ratio is always Jingwei / Raw, whatever
// the unit: for a rate (events/s) higher is better, for a time lower is
// better; Target says which. Raw and Ratio are nil for rows without a raw
// counterpart (memory, duplicates). The JSON form is the array element of
// `jingwei bench --json`:
//
//	{"scenario":…,"jingwei":…,"raw":…,"unit":…,"ratio":…,"target":…,"met":…}
//
// plus "error" when the scenario failed.
type Result struct {
	// Scenario names the row, e.g. "append 1 session (sync=interval)".
	Scenario string `json:"scenario"`
	// Jingwei is the median of the jingwei path.
	Jingwei float64 `json:"jingwei"`
	// Raw is the median of the raw baseline; nil if there is none.
	Raw *float64 `json:"raw"`
	// Unit is the unit of Jingwei and Raw ("events/s", "ms", "MiB", …).
	Unit string `json:"unit"`
	// Ratio is Jingwei / Raw; nil without Raw.
	Ratio *float64 `json:"ratio"`
	// Target is the target in words, e.g. "ratio >= 0.9" or "< 150 MiB".
	Target string `json:"target"`
	// Met reports whether the target was met; false for a failed scenario.
	Met bool `json:"met"`
	// Error is why the scenario failed; empty when it ran.
	Error string `json:"error,omitempty"`
}

// Check is how a Target compares.
type Check int

// The checks a Target can make.
const (
	// RatioAtLeast: Ratio ≥ Limit (rates: jingwei at least Limit × raw).
	RatioAtLeast Check = iota
	// RatioAtMost: Ratio ≤ Limit (times: jingwei at most Limit × raw).
	RatioAtMost
	// ValueAtMost: Jingwei ≤ Limit.
	ValueAtMost
	// ValueBelow: Jingwei < Limit.
	ValueBelow
	// ValueEqual: Jingwei == Limit (counts, such as duplicates).
	ValueEqual
	// AddedAtMost: Jingwei − Raw ≤ Limit (what jingwei adds to a time,
	// in the row's unit). Raw is recovered from the ratio, so a row
	// without one fails.
	AddedAtMost
)

// Target is what a row must reach. The zero value is "ratio >= 0".
type Target struct {
	// Check is the comparison.
	Check Check
	// Limit is the bound compared against.
	Limit float64
	// Text, when set, replaces the generated description (e.g. "<= TTL+1s
	// (3s)").
	Text string
}

// String describes the target: "ratio >= 0.9", "< 150 MiB" (unit appended
// by the caller through Text when needed).
func (t Target) String() string {
	if t.Text != "" {
		return t.Text
	}
	l := strconv.FormatFloat(t.Limit, 'f', -1, 64)
	switch t.Check {
	case RatioAtLeast:
		return "ratio >= " + l
	case RatioAtMost:
		return "ratio <= " + l
	case ValueAtMost:
		return "<= " + l
	case ValueBelow:
		return "< " + l
	case ValueEqual:
		return "= " + l
	case AddedAtMost:
		return "jingwei - raw <= " + l
	}
	return "?"
}

// Met reports whether jingwei (and ratio, for the ratio checks) meet the
// target. A NaN or infinite figure never meets a target, and a ratio check
// without a ratio fails.
func (t Target) Met(jingwei float64, ratio *float64) bool {
	switch t.Check {
	case RatioAtLeast, RatioAtMost:
		if ratio == nil || !finite(*ratio) {
			return false
		}
		if t.Check == RatioAtLeast {
			return *ratio >= t.Limit
		}
		return *ratio <= t.Limit
	case AddedAtMost:
		if ratio == nil || !finite(*ratio) || *ratio <= 0 || !finite(jingwei) {
			return false
		}
		return jingwei - jingwei / *ratio <= t.Limit
	}
	if !finite(jingwei) {
		return false
	}
	switch t.Check {
	case ValueAtMost:
		return jingwei <= t.Limit
	case ValueBelow:
		return jingwei < t.Limit
	case ValueEqual:
		return jingwei == t.Limit
	}
	return false
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// NewResult builds a row from the medians of the two sides: Ratio =
// jingwei / raw, Met from the target. A raw of zero (or NaN) leaves the
// ratio nil, which fails a ratio target.
func NewResult(scenario string, jingwei, raw float64, unit string, target Target) Result {
	r := Result{Scenario: scenario, Jingwei: jingwei, Unit: unit, Target: target.String()}
	if finite(raw) {
		r.Raw = &raw
		if raw != 0 {
			ratio := jingwei / raw
			r.Ratio = &ratio
		}
	}
	r.Met = target.Met(jingwei, r.Ratio)
	return r
}

// NewValueResult builds a row without a raw counterpart.
func NewValueResult(scenario string, jingwei float64, unit string, target Target) Result {
	return Result{Scenario: scenario, Jingwei: jingwei, Unit: unit, Target: target.String(), Met: target.Met(jingwei, nil)}
}

// failed builds the row of a scenario that could not run.
func failed(scenario string, target Target, err error) Result {
	return Result{Scenario: scenario, Jingwei: math.NaN(), Target: target.String(), Error: err.Error()}
}

// MarshalJSON writes NaN/Inf figures (a failed scenario) as 0, which JSON
// cannot carry otherwise; Error says why.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	p := plain(r)
	if !finite(p.Jingwei) {
		p.Jingwei = 0
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // targets read ">= 0.9", not "\u003e= 0.9"
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Median returns the median of xs (the mean of the two middle values for
// an even count); NaN for none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of xs by the
// nearest-rank method: the smallest value with at least p% of the values at
// or below it. NaN for none.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// WriteJSON writes the results as one JSON array.
func WriteJSON(w io.Writer, rs []Result) error {
	if rs == nil {
		rs = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(rs)
}

// WriteTable writes the results as an aligned table: scenario, jingwei,
// raw, unit, ratio, target, met. A failed scenario shows its error.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tjingwei\traw\tunit\tratio\ttarget\tmet")
	for _, r := range rs {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, "-", "-", "-", "-", r.Target, "ERROR")
			continue
		}
		raw, ratio := "-", "-"
		if r.Raw != nil {
			raw = fmtNum(*r.Raw)
		}
		if r.Ratio != nil {
			ratio = strconv.FormatFloat(*r.Ratio, 'f', 2, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%t\n", r.Scenario, fmtNum(r.Jingwei), raw, r.Unit, ratio, r.Target, r.Met)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rs {
		if r.Error != "" {
			fmt.Fprintf(w, "error in %q: %s\n", r.Scenario, strings.TrimSpace(r.Error))
		}
	}
	return nil
}

// fmtNum formats a figure with a precision that suits its size.
func fmtNum(f float64) string {
	a := math.Abs(f)
	switch {
	case !finite(f):
		return "-"
	case a == math.Trunc(a) && a < 1e15:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(f, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(f, 'f', 2, 64)
	default:
		return strconv.FormatFloat(f, 'f', 3, 64)
	}
}
