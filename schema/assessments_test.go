package schema_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

// batchOf returns an assessment batch message of the given members
// (written by hand, not by the encoder).
func batchOf(members ...string) string { return "[" + strings.Join(members, ",") + "]" }

// okAssessment2 is okAssessment's session's next call.
var okAssessment2 = strings.ReplaceAll(okAssessment, `"c-2"`, `"c-3"`)

// TestDecodeAssessments: an assessment message is one assessment (the
// object, as DecodeAssessment reads it) or a batch of two or more of one
// session in order; an empty batch, a batch of one, an element that is not
// an assessment, an invalid element (named by its index) and a mixed
// session batch are refused with ErrInvalidAssessment and a message that
// names the problem; the JSON Schema of the message agrees on everything
// it can judge (it cannot see sessions).
func TestDecodeAssessments(t *testing.T) {
	other := strings.Replace(okAssessment, `"session":"s-1"`, `"session":"s-2"`, 1)
	tooLong := strings.Replace(okAssessment, `"key":"op-1"`, `"key":"`+strings.Repeat("k", schema.MaxFieldBytes+1)+`"`, 1)
	tests := []struct {
		name, doc  string
		n          int    // assessments, when valid
		why        string // in the error, when not
		schemaSees bool
	}{
		{"one object", okAssessment, 1, "", true},
		{"one object, spaces", " \n" + okAssessment + "\t", 1, "", true},
		{"batch of two", batchOf(okAssessment, okAssessment2), 2, "", true},
		{"batch with spaces", "[ " + okAssessment + " ,\n" + okAssessment2 + " ]", 2, "", true},
		{"batch repeats a call", batchOf(okAssessment, okAssessment, okAssessment), 3, "", true},
		{"empty batch", `[]`, 0, "a batch of 0 assessments", true},
		{"batch of one", batchOf(okAssessment), 0, "a batch of 1 assessments", true},
		{"null", `null`, 0, "not a JSON object (one assessment) or array", true},
		{"string", `"a"`, 0, "not a JSON object (one assessment) or array", true},
		{"not JSON", `[{"session":`, 0, "", false},
		{"data after the batch", batchOf(okAssessment, okAssessment2) + `]`, 0, "data after the value", false},
		{"element not an object", batchOf(okAssessment, `17`), 0, "batch element 1: not a JSON object", true},
		{"nested batch", batchOf(okAssessment, batchOf(okAssessment, okAssessment2)), 0, "batch element 1: not a JSON object", true},
		{"null element", batchOf(`null`, okAssessment), 0, "batch element 0: not a JSON object", true},
		{"invalid element", batchOf(okAssessment, strings.Replace(okAssessment2, `"uncertain"`, `"done"`, 1)), 0, `batch element 1: outcome "done"`, true},
		{"element lacks a field", batchOf(okAssessment, strings.Replace(okAssessment2, `"attempts":2,`, "", 1)), 0, "batch element 1: ", true},
		{"element field too long", batchOf(okAssessment, tooLong), 0, "batch element 1: ", true},
		{"mixed sessions", batchOf(okAssessment, okAssessment2, other), 0, `batch element 2: session "s-2" is not the batch's "s-1"`, false},
		{"duplicate member in element", batchOf(okAssessment, strings.TrimSuffix(okAssessment2, "}")+`,"outcome":"completed"}`), 0, "duplicate", false},
		{"case variant in element", batchOf(okAssessment, strings.TrimSuffix(okAssessment2, "}")+`,"Outcome":"completed"}`), 0, "batch element 1: ", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			as, err := schema.DecodeAssessments([]byte(tt.doc))
			switch {
			case tt.n > 0 && (err != nil || len(as) != tt.n):
				t.Fatalf("DecodeAssessments = %d assessments, %v; want %d", len(as), err, tt.n)
			case tt.n == 0 && err == nil:
				t.Fatalf("DecodeAssessments accepted %s: %+v", tt.doc, as)
			case err != nil && !errors.Is(err, schema.ErrInvalidAssessment):
				t.Errorf("error %v does not match ErrInvalidAssessment", err)
			case err != nil && !strings.HasPrefix(err.Error(), "schema: invalid assessment: "):
				t.Errorf("error %q does not start with ErrInvalidAssessment's text", err)
			case err != nil && !strings.Contains(err.Error(), tt.why):
				t.Errorf("error %q does not say %q", err, tt.why)
			case err != nil && strings.Count(err.Error(), "schema: invalid assessment") != 1:
				t.Errorf("error %q repeats its prefix", err)
			}
			if tt.name == "element field too long" && !errors.Is(err, schema.ErrFieldTooLong) {
				t.Errorf("error %v does not match ErrFieldTooLong", err)
			}
			if tt.schemaSees {
				if serr := validate(t, "assessmentmessage", []byte(tt.doc)); (serr == nil) != (err == nil) {
					t.Errorf("Go says %v, assessmentmessage.schema.json says %v", err, serr)
				}
			}
			for i, a := range as { // members in order, each as DecodeAssessment reads it
				want, err := schema.DecodeAssessment([]byte([]string{okAssessment, okAssessment2, okAssessment}[i]))
				if err != nil || !reflect.DeepEqual(a, want) && tt.name != "batch repeats a call" {
					t.Errorf("member %d = %+v, want %+v (%v)", i, a, want, err)
				}
			}
		})
	}
	// The schema's single form is assessment.schema.json's.
	if err := validate(t, "assessmentmessage", []byte(strings.Replace(okAssessment, `"uncertain"`, `"done"`, 1))); err == nil {
		t.Error("assessmentmessage.schema.json accepts an invalid single assessment")
	}
}

// TestEncodeAssessments: one assessment is written as the object, byte for
// byte what EncodeAssessment writes; two or more as an array of exactly
// those objects, in order, that DecodeAssessments reads back unchanged; no
// assessment, a mixed-session batch and an out-of-range effect are
// refused and leave dst as given.
func TestEncodeAssessments(t *testing.T) {
	a, err := schema.DecodeAssessment([]byte(okAssessment))
	if err != nil {
		t.Fatal(err)
	}
	b, err := schema.DecodeAssessment([]byte(okAssessment2))
	if err != nil {
		t.Fatal(err)
	}
	one, err := schema.AppendAssessments([]byte("x"), []schema.Assessment{a})
	if err != nil || string(one) != "x"+okAssessment {
		t.Errorf("AppendAssessments of one = %s, %v; want x + the object", one, err)
	}
	two, err := schema.EncodeAssessments([]schema.Assessment{a, b, a})
	if want := batchOf(okAssessment, okAssessment2, okAssessment); err != nil || string(two) != want {
		t.Errorf("EncodeAssessments of three = %s, %v; want %s", two, err, want)
	}
	back, err := schema.DecodeAssessments(two)
	if err != nil || !reflect.DeepEqual(back, []schema.Assessment{a, b, a}) {
		t.Errorf("DecodeAssessments(EncodeAssessments(x)) = %+v, %v", back, err)
	}
	if err := validate(t, "assessmentmessage", two); err != nil {
		t.Errorf("assessmentmessage.schema.json refuses EncodeAssessments' batch: %v", err)
	}
	c := b
	c.Session = "s-2"
	bad := b
	bad.Contract = effect.Contract{Effect: effect.Effect(9)}
	for name, as := range map[string][]schema.Assessment{"none": nil, "mixed sessions": {a, c}, "bad effect": {a, bad}} {
		got, err := schema.AppendAssessments([]byte("x"), as)
		if err == nil || string(got) != "x" {
			t.Errorf("AppendAssessments(%s) = %q, %v; want an error and dst as given", name, got, err)
		}
	}
	if _, err := schema.EncodeAssessments([]schema.Assessment{a, c}); !errors.Is(err, schema.ErrInvalidAssessment) || !strings.Contains(err.Error(), `"s-2"`) {
		t.Errorf("mixed sessions: %v, want ErrInvalidAssessment naming the session", err)
	}
}

// The assessment id is the contract's literal form (docs/protocol.md §5.4).
func TestAssessmentID(t *testing.T) {
	a := schema.Assessment{Session: "s-1", CallID: "c-2", Evidence: "no_result"}
	if got, want := a.ID(), "a.s-1.c-2.no_result"; got != want {
		t.Fatalf("ID() = %q, want %q", got, want)
	}
}
