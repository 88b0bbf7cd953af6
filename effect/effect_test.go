package effect_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/effect"
)

func TestEffectWireValues(t *testing.T) {
	tests := []struct {
		e    effect.Effect
		wire string
		safe bool
	}{
		{effect.Unknown, "unknown", false},
		{effect.ReadOnly, "read_only", true},
		{effect.Idempotent, "idempotent", true},
		{effect.NonIdempotent, "non_idempotent", false},
	}
	for _, tt := range tests {
		t.Run(tt.wire, func(t *testing.T) {
			if got := tt.e.String(); got != tt.wire {
				t.Errorf("String() = %q, want %q", got, tt.wire)
			}
			if got := tt.e.Safe(); got != tt.safe {
				t.Errorf("Safe() = %v, want %v", got, tt.safe)
			}
			got, err := effect.Parse(tt.wire)
			if err != nil || got != tt.e {
				t.Errorf("Parse(%q) = %v, %v", tt.wire, got, err)
			}
			b, err := json.Marshal(tt.e)
			if err != nil || string(b) != `"`+tt.wire+`"` {
				t.Errorf("json.Marshal = %s, %v", b, err)
			}
			var back effect.Effect
			if err := json.Unmarshal(b, &back); err != nil || back != tt.e {
				t.Errorf("json.Unmarshal(%s) = %v, %v", b, back, err)
			}
		})
	}
}

func TestZeroValueIsUnknown(t *testing.T) {
	var e effect.Effect
	if e != effect.Unknown || e.Safe() {
		t.Fatalf("zero Effect = %v (safe %v), want unknown and not safe", e, e.Safe())
	}
	var m effect.Metadata
	if m.Contract.Effect != effect.Unknown {
		t.Fatalf("zero Metadata effect = %v, want unknown", m.Contract.Effect)
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{"", "Idempotent", "readonly", "non-idempotent", "effect(9)"} {
		if _, err := effect.Parse(s); !errors.Is(err, effect.ErrUnknownEffect) {
			t.Errorf("Parse(%q) err = %v, want ErrUnknownEffect", s, err)
		}
	}
	var e effect.Effect
	if err := json.Unmarshal([]byte(`"sometimes"`), &e); !errors.Is(err, effect.ErrUnknownEffect) {
		t.Errorf("Unmarshal unknown wire value: err = %v", err)
	}
	if _, err := json.Marshal(effect.Effect(7)); err == nil {
		t.Error("Marshal of an out-of-range effect succeeded")
	}
	if got := effect.Effect(7).String(); got != "effect(7)" {
		t.Errorf("String of out-of-range = %q", got)
	}
}

func TestContractValidate(t *testing.T) {
	tests := []struct {
		name string
		c    effect.Contract
		want error
	}{
		{"ok", effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}, nil},
		{"exactly 1024 bytes", effect.Contract{Effect: effect.ReadOnly, Revision: strings.Repeat("r", 1024)}, nil},
		{"1025 bytes", effect.Contract{Effect: effect.ReadOnly, Revision: strings.Repeat("r", 1025)}, effect.ErrRevisionTooLong},
		{"empty revision", effect.Contract{Effect: effect.NonIdempotent}, effect.ErrEmptyRevision},
		{"bad effect", effect.Contract{Effect: effect.Effect(9), Revision: "x"}, effect.ErrUnknownEffect},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Validate() = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestContractJSON(t *testing.T) {
	c := effect.Contract{Effect: effect.NonIdempotent, Revision: "pay-v1"}
	b, err := json.Marshal(c)
	if err != nil || string(b) != `{"effect":"non_idempotent","revision":"pay-v1"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	if got := c.String(); got != "non_idempotent@pay-v1" {
		t.Fatalf("String() = %q", got)
	}
}

func TestWithEffectCopies(t *testing.T) {
	base := effect.Metadata{Name: "orders.create", Description: "create an order"}
	m := base.WithEffect(effect.Idempotent, "orders-v1")
	if base.Contract.Effect != effect.Unknown || base.Contract.Revision != "" {
		t.Fatalf("WithEffect changed its receiver: %+v", base)
	}
	want := effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}
	if m.Contract != want || m.Name != base.Name || m.Description != base.Description {
		t.Fatalf("WithEffect = %+v, want contract %+v and the same name", m, want)
	}
}
