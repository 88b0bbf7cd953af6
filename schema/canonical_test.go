package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// TestCanonicalRFC8785Vectors runs the RFC 8785 test vectors (copied from
// the jcs module's testdata, see testdata/rfc8785). values.json holds
// 333333333.33333329, which RFC 8785 rounds to its double; jingwei keeps the
// exact value there, and only there.
func TestCanonicalRFC8785Vectors(t *testing.T) {
	ins, err := filepath.Glob("testdata/rfc8785/*.in.json")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no vectors: %v", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.json")
		t.Run(name, func(t *testing.T) {
			input, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(in, ".in.json") + ".out.json")
			if err != nil {
				t.Fatal(err)
			}
			want = bytes.TrimRight(want, "\n")
			if name == "values" {
				want = bytes.Replace(want, []byte("333333333.3333333"), []byte("333333333.33333329"), 1)
			}
			got, err := Canonical(input)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Canonical:\n got %s\nwant %s", got, want)
			}
		})
	}
}

func TestCanonical(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"sorted members", `{"b":1,"a":{"d":[3,2],"c":null}}`, `{"a":{"c":null,"d":[3,2]},"b":1}`},
		{"whitespace", " { \"a\" : [ true , false ] } \n", `{"a":[true,false]}`},
		{"int64 id kept exact", `{"id":1234567890123456789}`, `{"id":1234567890123456789}`},
		{"2^53+1 kept exact", `9007199254740993`, `9007199254740993`},
		{"max int64", `-9223372036854775808`, `-9223372036854775808`},
		{"uint64 max", `18446744073709551615`, `18446744073709551615`},
		{"negative zero", `-0`, `0`},
		{"negative zero float", `-0.0e5`, `0`},
		{"trailing zeros", `1.000`, `1`},
		{"exponent form of integer", `10e-1`, `1`},
		{"RFC layout 1e21", `1e21`, `1e+21`},
		{"RFC layout 1e20", `1E20`, `100000000000000000000`},
		{"RFC layout small", `0.000001`, `0.000001`},
		{"RFC layout smaller", `0.0000001`, `1e-7`},
		{"non-shortest decimal", `0.10000000000000001`, `0.10000000000000001`},
		{"exact double decimal stays literal", `0.1000000000000000055511151231257827021181583404541015625`, `0.1000000000000000055511151231257827021181583404541015625`},
		{"beyond double range", `[1e400,-1e400]`, `[1e+400,-1e+400]`},
		{"below double range", `1e-400`, `1e-400`},
		{"23 digit integer", `12345678901234567890123`, `1.2345678901234567890123e+22`},
		{"1e23 shortest", `100000000000000000000000`, `1e+23`},
		{"number in sorted object", `{"z":0.10000000000000001,"a":1e400,"m":[1,2.50]}`, `{"a":1e+400,"m":[1,2.5],"z":0.10000000000000001}`},
		{"string escapes", `"\u00e9\/\u001f"`, "\"é/\\u001f\""},
		{"utf16 order", `{"\ufb33":2,"\ud83d\ude02":1,"\u20ac":3}`, "{\"\u20ac\":3,\"\U0001F602\":1,\"\uFB33\":2}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonical(json.RawMessage(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Canonical(%s) = %s, want %s", tt.in, got, tt.want)
			}
			again, err := Canonical(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Errorf("not idempotent: %s -> %s (%v)", got, again, err)
			}
		})
	}
}

func TestCanonicalDistinguishes(t *testing.T) {
	pairs := [][2]string{
		{`{"id":1234567890123456789}`, `{"id":1234567890123456790}`},
		{`0.1`, `0.10000000000000001`},
		{`9007199254740992`, `9007199254740993`},
		{`1e400`, `1e401`},
		{`1e-400`, `0`},
		{`[1,2]`, `[2,1]`},
		{`{"a":"1"}`, `{"a":1}`},
	}
	for _, p := range pairs {
		a, err := Canonical(json.RawMessage(p[0]))
		if err != nil {
			t.Fatal(err)
		}
		b, err := Canonical(json.RawMessage(p[1]))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(a, b) {
			t.Errorf("%s and %s both canonicalize to %s", p[0], p[1], a)
		}
	}
}

func TestCanonicalRejects(t *testing.T) {
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	tests := []struct{ name, in string }{
		{"empty", ``},
		{"bad json", `{"a":}`},
		{"trailing data", `{} {}`},
		{"duplicate member", `{"a":1,"a":2}`},
		{"nested duplicate", `{"x":[{"k":1,"b":2,"k":3}]}`},
		{"escaped duplicate", `{"a":1,"\u0061":2}`},
		{"invalid utf8", "\"\xff\""},
		{"lone high surrogate", `"\ud800"`},
		{"lone low surrogate", `"\udc00x"`},
		{"leading zero", `01`},
		{"huge exponent", `1e10001`},
		{"huge exponent by digits", `10e10000`},
		{"tiny value", `0.1e-10000`},
		{"huge negative exponent", `1e-99999999999999999999`},
		{"number too long", strings.Repeat("1", MaxNumberBytes+1)},
		{"too deep", deep},
		{"nan", `NaN`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonical(json.RawMessage(tt.in))
			if !errors.Is(err, ErrInvalidJSON) {
				t.Fatalf("Canonical(%.40q) = %s, %v; want ErrInvalidJSON", tt.in, got, err)
			}
			if _, err := ArgsDigest(json.RawMessage(tt.in)); !errors.Is(err, ErrInvalidJSON) {
				t.Fatalf("ArgsDigest: %v, want ErrInvalidJSON", err)
			}
		})
	}
	// Exactly at the bounds passes.
	for _, in := range []string{`1e10000`, `1e-10000`, `0.1e10001`, `-99e-10001`, `0e10005`, strings.Repeat("7", MaxNumberBytes), strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)} {
		if _, err := Canonical(json.RawMessage(in)); err != nil {
			t.Errorf("Canonical(%.30s…): %v", in, err)
		}
	}
}

func TestArgsDigest(t *testing.T) {
	got, err := ArgsDigest(json.RawMessage(`{ "sku": "A-1", "qty": 2 }`))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(`{"qty":2,"sku":"A-1"}`))
	if want := "sha256:" + hex.EncodeToString(sum[:]); got != want {
		t.Errorf("ArgsDigest = %s, want %s", got, want)
	}
	other, err := ArgsDigest(json.RawMessage(`{"sku":"A-1","qty":2.0}`))
	if err != nil || other != got {
		t.Errorf("qty 2.0 digests to %s (%v), want %s", other, err, got)
	}
}

// es6Number formats a finite double as ECMAScript's Number::toString does
// (RFC 8785's number serialization): the shortest round-trip digits, plain
// from 1e-6 up to 1e21, exponent form (no leading exponent zeros) outside.
// It is the reference the exact layout is checked against.
func es6Number(f float64) string {
	if f == 0 {
		return "0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	if f >= 1e-6 && f < 1e21 {
		return sign + strconv.FormatFloat(f, 'f', -1, 64)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(s, "e")
	e, _ := strconv.Atoi(exp)
	if e < 0 {
		return sign + mant + "e-" + strconv.Itoa(-e)
	}
	return sign + mant + "e+" + strconv.Itoa(e)
}

// TestES6LayoutMatchesRFC8785 checks that the exact layout equals RFC
// 8785's number formatting on the shortest digits of random doubles, so
// output is RFC 8785 wherever no rounding is involved. (It compared with
// the jcs library's NumberToJSON before the codec moved to jsontext; the
// reference is now es6Number, and jsontext's own RFC 8785 canonicalization
// on the plain literal.)
func TestES6LayoutMatchesRFC8785(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(f float64) {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return
		}
		want := es6Number(f)
		lit := strconv.FormatFloat(f, 'g', -1, 64)
		got, err := exactNumber([]byte(lit))
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%s: layout %s, RFC 8785 %s", lit, got, want)
		}
		v := jsontext.Value(lit)
		if err := v.Canonicalize(); err != nil || string(v) != want {
			t.Fatalf("%s: jsontext canonicalizes to %s (%v), reference %s", lit, v, err, want)
		}
	}
	for _, f := range []float64{1, -1, 0.5, 1e21, 1e-6, 1e-7, 123e18, 5e-324, math.MaxFloat64, 9007199254740992, 0.1, 1.5e300} {
		check(f)
	}
	for range 20000 {
		check(math.Float64frombits(r.Uint64()))
		check(float64(r.Int64N(1<<53)) / math.Pow(10, float64(r.IntN(30))))
	}
}

// TestCanonicalNumberEquality generates number literals and their
// re-spellings: two literals canonicalize alike exactly when their exact
// values (math/big.Rat) are equal.
func TestCanonicalNumberEquality(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	lit := func() string {
		var b strings.Builder
		if r.IntN(3) == 0 {
			b.WriteByte('-')
		}
		n := 1 + r.IntN(25)
		b.WriteByte(byte('1' + r.IntN(9)))
		for range n - 1 {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
		if r.IntN(2) == 0 {
			b.WriteByte('.')
			for range 1 + r.IntN(20) {
				b.WriteByte(byte('0' + r.IntN(10)))
			}
		}
		if r.IntN(2) == 0 {
			b.WriteString("e" + strconv.Itoa(r.IntN(80)-40))
		}
		return b.String()
	}
	respell := func(s string, zeros int) string {
		// Write the same value as "0.<digits><zeros>e<n>".
		sign := ""
		if s[0] == '-' {
			sign, s = "-", s[1:]
		}
		exp := 0
		if i := strings.IndexAny(s, "eE"); i >= 0 {
			exp, _ = strconv.Atoi(s[i+1:])
			s = s[:i]
		}
		intPart, frac, _ := strings.Cut(s, ".")
		digits := intPart + frac + strings.Repeat("0", zeros)
		return sign + "0." + digits + "e" + strconv.Itoa(exp+len(intPart))
	}
	rat := func(s string) *big.Rat {
		x, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("big.Rat cannot parse %s", s)
		}
		return x
	}
	equalCases, diffCases := 0, 0
	for range 3000 {
		a := lit()
		var b string
		switch r.IntN(4) {
		case 0:
			b = lit()
		case 1:
			b = respell(a, r.IntN(3))
		case 2:
			b = respell(lit(), 0)
		case 3:
			b = a
			if strings.HasPrefix(b, "-") {
				b = b[1:]
			} else {
				b = "-" + b
			}
		}
		ca, err := Canonical(json.RawMessage(a))
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		cb, err := Canonical(json.RawMessage(b))
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		same := rat(a).Cmp(rat(b)) == 0
		if same {
			equalCases++
		} else {
			diffCases++
		}
		if bytes.Equal(ca, cb) != same {
			t.Fatalf("%s → %s and %s → %s: canonical equal %v, values equal %v", a, ca, b, cb, !same, same)
		}
		if rat(string(ca)).Cmp(rat(a)) != 0 {
			t.Fatalf("%s canonicalizes to %s, a different value", a, ca)
		}
	}
	if equalCases < 500 || diffCases < 500 {
		t.Fatalf("generator too narrow: %d equal, %d different pairs", equalCases, diffCases)
	}
}

// FuzzCanonical checks, on arbitrary inputs: errors wrap ErrInvalidJSON;
// the output is JSON, idempotent and holds the same value (numbers compared
// exactly); and two inputs canonicalize alike exactly when they hold the
// same value.
func FuzzCanonical(f *testing.F) {
	pairs := [][2]string{
		{`{"sku":"A-1","qty":2}`, `{ "qty": 2.0, "sku": "A-1" }`},
		{`1234567890123456789`, `1234567890123456790`},
		{`0.10000000000000001`, `0.1`},
		{`-0`, `0e7`},
		{`1e400`, `10e399`},
		{`{"a":[1,{"b":null}],"\u20ac":"x"}`, `{"€":"x","a":[1,{"b":null}]}`},
		{`"\ud83d\ude02"`, `"😂"`},
		{`[1.0,10e-1,0.1e1]`, `[1,1,1]`},
		{`{"a":1,"a":2}`, `{"a":2}`},
	}
	for _, p := range pairs {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ca, ok := checkCanonical(t, a)
		if !ok {
			return
		}
		cb, ok := checkCanonical(t, b)
		if !ok {
			return
		}
		if same := sameJSON(t, a, b); bytes.Equal(ca, cb) != same {
			t.Fatalf("%q -> %q and %q -> %q: canonical equal %v, values equal %v", a, ca, b, cb, !same, same)
		}
	})
}

// checkCanonical canonicalizes in and checks the single-input properties.
func checkCanonical(t *testing.T, in []byte) ([]byte, bool) {
	c, err := Canonical(in)
	if err != nil {
		if !errors.Is(err, ErrInvalidJSON) {
			t.Fatalf("error not ErrInvalidJSON: %v", err)
		}
		return nil, false
	}
	if !json.Valid(c) {
		t.Fatalf("output is not JSON: %q", c)
	}
	again, err := Canonical(c)
	if err != nil {
		t.Fatalf("canonical output rejected: %q: %v", c, err)
	}
	if !bytes.Equal(again, c) {
		t.Fatalf("not idempotent:\n%q\n%q", c, again)
	}
	if !sameJSON(t, in, c) {
		t.Fatalf("value changed: %q -> %q", in, c)
	}
	return c, true
}

// sameJSON reports whether two JSON texts hold the same value, comparing
// numbers exactly.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	dec := func(x []byte) any {
		d := json.NewDecoder(bytes.NewReader(x))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("decode %q: %v", x, err)
		}
		return v
	}
	var eq func(x, y any) bool
	eq = func(x, y any) bool {
		switch x := x.(type) {
		case json.Number:
			y, ok := y.(json.Number)
			if !ok {
				return false
			}
			rx, ok1 := new(big.Rat).SetString(string(x))
			ry, ok2 := new(big.Rat).SetString(string(y))
			return ok1 && ok2 && rx.Cmp(ry) == 0
		case map[string]any:
			y, ok := y.(map[string]any)
			if !ok || len(x) != len(y) {
				return false
			}
			for k, v := range x {
				if w, ok := y[k]; !ok || !eq(v, w) {
					return false
				}
			}
			return true
		case []any:
			y, ok := y.([]any)
			if !ok || len(x) != len(y) {
				return false
			}
			for i := range x {
				if !eq(x[i], y[i]) {
					return false
				}
			}
			return true
		default:
			return x == y
		}
	}
	return eq(dec(a), dec(b))
}

// BenchmarkCanonical canonicalizes typical tool arguments, one with only
// shortest-form numbers and one with 64-bit ids (which take the exact-number
// path), and reports the time relative to jsontext's own RFC 8785
// canonicalization (numbers as doubles) of the same bytes measured in the
// same run.
func BenchmarkCanonical(b *testing.B) {
	inputs := map[string]string{
		"plain":    `{"sku":"A-1","qty":2,"price":19.99,"tags":["x","y"],"ship":{"to":"Berlin","express":true,"eta":null}}`,
		"int64ids": `{"order_id":1234567890123456789,"user_id":9007199254740993,"qty":2,"lines":[{"sku":"A","n":1},{"sku":"B","n":3}]}`,
	}
	for name, in := range inputs {
		raw := []byte(in)
		b.Run(name, func(b *testing.B) {
			var base, ours time.Duration
			for b.Loop() {
				t0 := time.Now()
				v := jsontext.Value(bytes.Clone(raw))
				if err := v.Canonicalize(); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := Canonical(raw); err != nil {
					b.Fatal(err)
				}
				ours += time.Since(t1)
				base += t1.Sub(t0)
			}
			b.ReportMetric(float64(ours)/float64(base), "canonical/jsontext")
		})
	}
}
