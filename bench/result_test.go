package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want float64
	}{
		{"one", []float64{3}, 3},
		{"odd unsorted", []float64{5, 1, 3}, 3},
		{"even is the mean of the middle two", []float64{4, 1, 3, 2}, 2.5},
		{"outlier does not move it", []float64{10, 11, 9, 1000, 10}, 10},
		{"duplicates", []float64{2, 2, 2, 7}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			if got := Median(tc.in); got != tc.want {
				t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("Median modified its input: %v", tc.in)
			}
		})
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("Median(nil) is not NaN")
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tc := range []struct {
		p    float64
		want float64
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {10, 1}, {1, 1}} {
		if got := Percentile(xs, tc.p); got != tc.want {
			t.Errorf("Percentile(p%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Percentile(nil) is not NaN")
	}
}

func ptr(f float64) *float64 { return &f }

func TestTargetMet(t *testing.T) {
	for _, tc := range []struct {
		name    string
		target  Target
		jingwei float64
		ratio   *float64
		want    bool
	}{
		// Higher is better: a rate at least Limit × raw.
		{"rate above", Target{Check: RatioAtLeast, Limit: 0.9}, 950, ptr(0.95), true},
		{"rate exactly at", Target{Check: RatioAtLeast, Limit: 0.9}, 900, ptr(0.9), true},
		{"rate below", Target{Check: RatioAtLeast, Limit: 0.9}, 890, ptr(0.89), false},
		{"rate without raw", Target{Check: RatioAtLeast, Limit: 0.9}, 890, nil, false},
		{"rate NaN", Target{Check: RatioAtLeast, Limit: 0.9}, 1, ptr(math.NaN()), false},
		// Lower is better: a time at most Limit × raw.
		{"time under", Target{Check: RatioAtMost, Limit: 1.2}, 110, ptr(1.1), true},
		{"time exactly at", Target{Check: RatioAtMost, Limit: 1.2}, 120, ptr(1.2), true},
		{"time over", Target{Check: RatioAtMost, Limit: 1.2}, 130, ptr(1.3), false},
		{"time infinite", Target{Check: RatioAtMost, Limit: 1.2}, 130, ptr(math.Inf(1)), false},
		// Values.
		{"at most, under", Target{Check: ValueAtMost, Limit: 3}, 2.9, nil, true},
		{"at most, equal", Target{Check: ValueAtMost, Limit: 3}, 3, nil, true},
		{"at most, over", Target{Check: ValueAtMost, Limit: 3}, 3.01, nil, false},
		{"below, under", Target{Check: ValueBelow, Limit: 150}, 149.9, nil, true},
		{"below, equal", Target{Check: ValueBelow, Limit: 150}, 150, nil, false},
		{"below, NaN", Target{Check: ValueBelow, Limit: 150}, math.NaN(), nil, false},
		{"equal zero", Target{Check: ValueEqual}, 0, nil, true},
		{"one duplicate", Target{Check: ValueEqual}, 1, nil, false},
		// Added time: jingwei − raw (raw = jingwei / ratio).
		{"added under", Target{Check: AddedAtMost, Limit: 3}, 4, ptr(2.0), true},
		{"added equal", Target{Check: AddedAtMost, Limit: 3}, 4, ptr(4.0), true},
		{"added over", Target{Check: AddedAtMost, Limit: 3}, 14, ptr(14.0), false},
		{"added without raw", Target{Check: AddedAtMost, Limit: 3}, 1, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.target.Met(tc.jingwei, tc.ratio); got != tc.want {
				t.Errorf("%s.Met(%v, %v) = %v, want %v", tc.target, tc.jingwei, tc.ratio, got, tc.want)
			}
		})
	}
}

func TestNewResult(t *testing.T) {
	for _, tc := range []struct {
		name      string
		jw, raw   float64
		target    Target
		wantRatio *float64
		wantMet   bool
	}{
		{"faster than target", 95, 100, Target{Check: RatioAtLeast, Limit: 0.9}, ptr(0.95), true},
		{"slower than target", 80, 100, Target{Check: RatioAtLeast, Limit: 0.9}, ptr(0.8), false},
		{"time within", 110, 100, Target{Check: RatioAtMost, Limit: 1.2}, ptr(1.1), true},
		{"time over", 130, 100, Target{Check: RatioAtMost, Limit: 1.2}, ptr(1.3), false},
		{"raw zero has no ratio", 5, 0, Target{Check: RatioAtLeast, Limit: 0.9}, nil, false},
		{"value target ignores the ratio", 2.5, 2, Target{Check: ValueAtMost, Limit: 3}, ptr(1.25), true},
		{"added within", 2.5, 0.5, Target{Check: AddedAtMost, Limit: 3}, ptr(5.0), true},
		{"added over", 16, 0.5, Target{Check: AddedAtMost, Limit: 15}, ptr(32.0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewResult("x", tc.jw, tc.raw, "u", tc.target)
			if r.Raw == nil || *r.Raw != tc.raw {
				t.Errorf("Raw = %v, want %v", r.Raw, tc.raw)
			}
			switch {
			case tc.wantRatio == nil && r.Ratio != nil:
				t.Errorf("Ratio = %v, want none", *r.Ratio)
			case tc.wantRatio != nil && (r.Ratio == nil || math.Abs(*r.Ratio-*tc.wantRatio) > 1e-9):
				t.Errorf("Ratio = %v, want %v", r.Ratio, *tc.wantRatio)
			}
			if r.Met != tc.wantMet {
				t.Errorf("Met = %v, want %v", r.Met, tc.wantMet)
			}
			if r.Target != tc.target.String() {
				t.Errorf("Target = %q, want %q", r.Target, tc.target.String())
			}
		})
	}
}

func TestTargetString(t *testing.T) {
	for _, tc := range []struct {
		t    Target
		want string
	}{
		{Target{Check: RatioAtLeast, Limit: 0.9}, "ratio >= 0.9"},
		{Target{Check: RatioAtMost, Limit: 1.2}, "ratio <= 1.2"},
		{Target{Check: ValueBelow, Limit: 150}, "< 150"},
		{Target{Check: ValueEqual}, "= 0"},
		{Target{Check: AddedAtMost, Limit: 3}, "jingwei - raw <= 3"},
		{Target{Check: ValueAtMost, Limit: 3, Text: "<= TTL+1s (3s)"}, "<= TTL+1s (3s)"},
	} {
		if got := tc.t.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestWriteJSONShape(t *testing.T) {
	rs := []Result{
		NewResult("append", 950, 1000, "events/s", Target{Check: RatioAtLeast, Limit: 0.9}),
		NewValueResult("memory", 42, "MiB", Target{Check: ValueBelow, Limit: 150}),
		failed("crash", Target{Text: "-"}, errors.New("boom")),
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rs); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, buf.String())
	}
	if len(got) != len(rs) {
		t.Fatalf("%d elements, want %d", len(got), len(rs))
	}
	want := []string{"jingwei", "met", "ratio", "raw", "scenario", "target", "unit"}
	for i, m := range got {
		var keys []string
		for k := range m {
			if k != "error" {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		if !slices.Equal(keys, want) {
			t.Errorf("element %d has keys %v, want %v", i, keys, want)
		}
	}
	if got[0]["ratio"].(float64) != 0.95 || got[0]["met"] != true || got[0]["raw"].(float64) != 1000 {
		t.Errorf("append row: %v", got[0])
	}
	if got[1]["raw"] != nil || got[1]["ratio"] != nil || got[1]["met"] != true {
		t.Errorf("memory row: raw and ratio must be null: %v", got[1])
	}
	if got[2]["met"] != false || got[2]["error"] != "boom" || got[2]["jingwei"].(float64) != 0 {
		t.Errorf("failed row: %v", got[2])
	}
	if !strings.Contains(buf.String(), `"target": "ratio >= 0.9"`) {
		t.Errorf("targets are HTML-escaped:\n%s", buf.String())
	}
	if _, ok := got[0]["error"]; ok {
		t.Error("a row that ran has an error member")
	}

	buf.Reset()
	if err := WriteJSON(&buf, nil); err != nil || strings.TrimSpace(buf.String()) != "[]" {
		t.Errorf("no rows: %q, %v", buf.String(), err)
	}
}

func TestWriteTable(t *testing.T) {
	rs := []Result{
		NewResult("append", 800, 1000, "events/s", Target{Check: RatioAtLeast, Limit: 0.9}),
		failed("crash", Target{Text: "-"}, errors.New("worker died")),
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, rs); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("want header, 2 rows and the error line:\n%s", out)
	}
	for _, f := range []string{"scenario", "jingwei", "raw", "unit", "ratio", "target", "met"} {
		if !strings.Contains(lines[0], f) {
			t.Errorf("header lacks %q: %s", f, lines[0])
		}
	}
	if f := strings.Fields(lines[1]); !slices.Equal(f, []string{"append", "800", "1000", "events/s", "0.80", "ratio", ">=", "0.9", "false"}) {
		t.Errorf("row: %q", f)
	}
	if !strings.Contains(lines[2], "ERROR") || !strings.Contains(lines[3], "worker died") {
		t.Errorf("failed row:\n%s", out)
	}
	// Columns are aligned: "jingwei" starts at the same offset as the figure.
	if strings.Index(lines[0], "jingwei") != strings.Index(lines[1], "800") {
		t.Errorf("columns not aligned:\n%s", out)
	}
}

func TestAlternate(t *testing.T) {
	var order []string
	jw := func(_ context.Context, round int) (float64, error) {
		order = append(order, "jw")
		return float64(100 + round), nil
	}
	raw := func(_ context.Context, round int) (float64, error) {
		order = append(order, "raw")
		return float64(200 + round), nil
	}
	jws, raws, err := alternate(context.Background(), 4, jw, raw)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"jw", "raw", "raw", "jw", "jw", "raw", "raw", "jw"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if !slices.Equal(jws, []float64{100, 101, 102, 103}) || !slices.Equal(raws, []float64{200, 201, 202, 203}) {
		t.Errorf("jws %v raws %v: figures landed on the wrong side", jws, raws)
	}
	boom := errors.New("boom")
	_, _, err = alternate(context.Background(), 3, jw, func(context.Context, int) (float64, error) { return 0, boom })
	if !errors.Is(err, boom) {
		t.Errorf("error %v, want boom", err)
	}
}

func TestParseStatus(t *testing.T) {
	in := "Name:\tjingwei\nVmPeak:\t  900000 kB\nVmHWM:\t   30720 kB\nVmRSS:\t   20480 kB\nThreads:\t9\n"
	got, err := parseStatus(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got["VmRSS"] != 20480 || got["VmHWM"] != 30720 || got["VmPeak"] != 900000 || len(got) != 3 {
		t.Errorf("parseStatus = %v", got)
	}
}

func TestBar(t *testing.T) {
	var buf bytes.Buffer
	b := &Bar{W: &buf, Width: 10}
	b.Start(4)
	b.Step(2, "inspect")
	if !strings.Contains(buf.String(), "[#####.....] 2/4") || !strings.Contains(buf.String(), "inspect") {
		t.Errorf("bar: %q", buf.String())
	}
	b.Done()
	if !strings.HasSuffix(buf.String(), "\r") {
		t.Errorf("Done does not clear the line: %q", buf.String())
	}
}
