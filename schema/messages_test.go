package schema_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/schema"
)

// TestDecodeReview checks DecodeReview case by case, and that it agrees with
// review.schema.json on every case the schema can judge (everything but
// duplicate and case-variant member names, which a JSON Schema cannot see).
func TestDecodeReview(t *testing.T) {
	const ok = `{"v":1,"session":"s-1","call_id":"c-1","operator":"alice@ops","evidence":"ticket-431","verdict":"not_executed","at":"2026-11-29T11:00:00Z"}`
	signed := strings.TrimSuffix(ok, "}") + `,"signer":"UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4","sig":"c2lnbmF0dXJl"}`
	long := strings.Repeat("o", schema.MaxFieldBytes+1)
	tests := []struct {
		name, doc  string
		code       schema.Code // "" for valid
		schemaSees bool        // the schema can judge this case
	}{
		{"valid", ok, "", true},
		{"valid signed", signed, "", true},
		{"valid without at", strings.Replace(ok, `,"at":"2026-11-29T11:00:00Z"`, "", 1), "", true},
		{"empty evidence", strings.Replace(ok, `"ticket-431"`, `""`, 1), "", true},
		{"unknown member", strings.TrimSuffix(ok, "}") + `,"note":"x"}`, "", true},
		{"bad verdict", strings.Replace(ok, "not_executed", "maybe", 1), schema.CodeInvalidReview, true},
		{"empty operator", strings.Replace(ok, `"alice@ops"`, `""`, 1), schema.CodeInvalidReview, true},
		{"missing evidence", strings.Replace(ok, `"evidence":"ticket-431",`, "", 1), schema.CodeInvalidReview, true},
		{"null evidence", strings.Replace(ok, `"ticket-431"`, `null`, 1), schema.CodeInvalidReview, true},
		{"missing call_id", strings.Replace(ok, `"call_id":"c-1",`, "", 1), schema.CodeInvalidReview, true},
		{"bad session", strings.Replace(ok, `"s-1"`, `"s 1"`, 1), schema.CodeInvalidReview, true},
		{"wrong version", strings.Replace(ok, `"v":1`, `"v":2`, 1), schema.CodeInvalidReview, true},
		{"bad at", strings.Replace(ok, "2026-11-29T11:00:00Z", "today", 1), schema.CodeInvalidReview, true},
		{"sig without signer", strings.TrimSuffix(ok, "}") + `,"sig":"abc"}`, schema.CodeInvalidReview, true},
		{"bad signer", strings.Replace(signed, "UDXU4", "NDXU4", 1), schema.CodeInvalidReview, true},
		{"operator too long", strings.Replace(ok, `"alice@ops"`, `"`+long+`"`, 1), schema.CodeFieldTooLong, true},
		{"evidence too long", strings.Replace(ok, `"ticket-431"`, `"`+long+`"`, 1), schema.CodeFieldTooLong, true},
		{"not an object", `["x"]`, schema.CodeInvalidReview, true},
		{"duplicate verdict", strings.TrimSuffix(ok, "}") + `,"verdict":"completed"}`, schema.CodeInvalidReview, false},
		{"case variant", strings.TrimSuffix(ok, "}") + `,"Verdict":"completed"}`, schema.CodeInvalidReview, false},
		{"bad json", ok[:20], schema.CodeInvalidReview, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := schema.DecodeReview([]byte(tt.doc))
			if got := schema.CodeOf(err); got != tt.code || (err != nil) != (tt.code != "") {
				t.Fatalf("DecodeReview = %+v, %v; want code %q", r, err, tt.code)
			}
			if tt.schemaSees {
				if serr := validate(t, "review", []byte(tt.doc)); (serr == nil) != (err == nil) {
					t.Errorf("Go says %v, review.schema.json says %v", err, serr)
				}
			}
		})
	}
	for _, fx := range loadFixtures(t) {
		if len(fx.Review) == 0 || string(fx.Review) == "null" {
			continue
		}
		if _, err := schema.DecodeReview(fx.Review); err != nil {
			t.Errorf("%s: fixture review: %v", fx.Name, err)
		}
	}
}

func TestDecodeRequest(t *testing.T) {
	const ok = `{"v":1,"request_id":"r-9","session":"s-1","task":"t-1","tool":"orders.create","arguments":{"sku":"A","qty":1},"provider_call_id":"toolu_1"}`
	long := strings.Repeat("r", schema.MaxFieldBytes+1)
	tests := []struct {
		name, doc  string
		valid      bool
		tooLong    bool
		schemaSees bool
	}{
		{"valid", ok, true, false, true},
		{"valid minimal", `{"v":1,"request_id":"r","session":"s","task":"t","tool":"x","arguments":[]}`, true, false, true},
		{"null arguments", strings.Replace(ok, `{"sku":"A","qty":1}`, "null", 1), true, false, true},
		{"missing arguments", strings.Replace(ok, `"arguments":{"sku":"A","qty":1},`, "", 1), false, false, true},
		{"missing request_id", strings.Replace(ok, `"request_id":"r-9",`, "", 1), false, false, true},
		{"request_id too long", strings.Replace(ok, `"r-9"`, `"`+long+`"`, 1), false, true, true},
		{"bad session", strings.Replace(ok, `"s-1"`, `"s.1"`, 1), false, false, true},
		{"missing task", strings.Replace(ok, `"task":"t-1",`, "", 1), false, false, true},
		{"missing tool", strings.Replace(ok, `"tool":"orders.create",`, "", 1), false, false, true},
		{"wrong version", strings.Replace(ok, `"v":1`, `"v":3`, 1), false, false, true},
		{"duplicate in arguments", strings.Replace(ok, `"qty":1`, `"qty":1,"sku":"B"`, 1), false, false, false},
		{"case variant", strings.Replace(ok, `"tool":`, `"Tool":"x","tool":`, 1), false, false, false},
		{"huge number", strings.Replace(ok, `"qty":1`, `"qty":1e20000`, 1), false, false, false},
		{"task with a space", strings.Replace(ok, `"t-1"`, `"my task"`, 1), false, false, true},
		{"task with a dot", strings.Replace(ok, `"t-1"`, `"orders.v1"`, 1), false, false, true},
		{"task of 128 bytes", strings.Replace(ok, `"t-1"`, `"`+strings.Repeat("t", 128)+`"`, 1), true, false, true},
		{"task of 129 bytes", strings.Replace(ok, `"t-1"`, `"`+strings.Repeat("t", 129)+`"`, 1), false, false, true},
		{"session of 129 bytes", strings.Replace(ok, `"s-1"`, `"`+strings.Repeat("s", 129)+`"`, 1), false, false, true},
		{"tool of 1024 bytes", strings.Replace(ok, `"orders.create"`, `"`+strings.Repeat("x", 1024)+`"`, 1), true, false, true},
		{"tool too long", strings.Replace(ok, `"orders.create"`, `"`+strings.Repeat("x", 1025)+`"`, 1), false, true, true},
		{"request_id of 1024 bytes", strings.Replace(ok, `"r-9"`, `"`+strings.Repeat("r", 1024)+`"`, 1), true, false, true},
		{"provider_call_id of 1024 bytes", strings.Replace(ok, `"toolu_1"`, `"`+strings.Repeat("p", 1024)+`"`, 1), true, false, true},
		{"provider_call_id too long", strings.Replace(ok, `"toolu_1"`, `"`+strings.Repeat("p", 1025)+`"`, 1), false, true, true},
		{"empty tool", strings.Replace(ok, `"orders.create"`, `""`, 1), false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := schema.DecodeRequest([]byte(tt.doc))
			if tt.valid != (err == nil) {
				t.Fatalf("DecodeRequest = %+v, %v; want valid %v", r, err, tt.valid)
			}
			if err != nil && !errors.Is(err, schema.ErrInvalidRequest) {
				t.Errorf("error %v does not match ErrInvalidRequest", err)
			}
			if tt.tooLong != errors.Is(err, schema.ErrFieldTooLong) {
				t.Errorf("error %v: field_too_long %v, want %v", err, !tt.tooLong, tt.tooLong)
			}
			if tt.schemaSees {
				if serr := validate(t, "request", []byte(tt.doc)); (serr == nil) != (err == nil) {
					t.Errorf("Go says %v, request.schema.json says %v", err, serr)
				}
			}
		})
	}
	// Errors name the field.
	for field, doc := range map[string]string{
		"task":             strings.Replace(ok, `"t-1"`, `"my task"`, 1),
		"tool":             strings.Replace(ok, `"orders.create"`, `"`+strings.Repeat("x", 1025)+`"`, 1),
		"provider_call_id": strings.Replace(ok, `"toolu_1"`, `"`+strings.Repeat("p", 1025)+`"`, 1),
		"session":          strings.Replace(ok, `"s-1"`, `"s.1"`, 1),
		"request_id":       strings.Replace(ok, `"r-9"`, `""`, 1),
	} {
		if _, err := schema.DecodeRequest([]byte(doc)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("error %v does not name %s", err, field)
		}
	}
	r, err := schema.DecodeRequest([]byte(ok))
	if err != nil || r.RequestID != "r-9" || string(r.Arguments) != `{"sku":"A","qty":1}` || r.ProviderCallID != "toolu_1" {
		t.Fatalf("DecodeRequest = %+v, %v", r, err)
	}
	// What Go encodes, Go decodes.
	b, _ := json.Marshal(r)
	if _, err := schema.DecodeRequest(b); err != nil {
		t.Errorf("re-decoding %s: %v", b, err)
	}
}
