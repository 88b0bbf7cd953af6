package approval

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/worker"
)

func TestParseRules(t *testing.T) {
	rules, err := ParseRules([]string{"orders.create", "payments.charge:amount.cents>100"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r := rules["orders.create"]; r == nil || r.When != nil || r.Timeout != time.Minute {
		t.Errorf("orders.create: %+v, want an unconditional rule of 1m", r)
	}
	when := rules["payments.charge"].When
	for args, want := range map[string]bool{
		`{"amount":{"cents":101}}`: true,
		`{"amount":{"cents":100}}`: false,
		`{"amount":{}}`:            true, // missing: it asks
		`{"amount":{"cents":"x"}}`: true, // not a number: it asks
	} {
		if got := when(json.RawMessage(args)); got != want {
			t.Errorf("When(%s) = %v, want %v", args, got, want)
		}
	}
	for _, bad := range []string{":x>1", "t:x", "t:>1", "t:x>y"} {
		if _, err := ParseRules([]string{bad}, time.Minute); err == nil {
			t.Errorf("ParseRules(%q): no error", bad)
		}
	}
	if _, err := ParseRules(nil, 0); err == nil {
		t.Error("a zero timeout: no error")
	}
}

func TestApplyRules(t *testing.T) {
	list := []worker.Tool{{}, {}}
	list[0].Metadata.Name, list[1].Metadata.Name = "a", "b"
	rule := &worker.ApprovalRule{Timeout: time.Second}
	got, err := ApplyRules(list, map[string]*worker.ApprovalRule{"b": rule})
	if err != nil || got[0].Approval != nil || got[1].Approval != rule {
		t.Fatalf("ApplyRules = %+v, %v", got, err)
	}
	if _, err := ApplyRules(list, map[string]*worker.ApprovalRule{"c": rule}); err == nil || !strings.Contains(err.Error(), `no tool "c"`) {
		t.Errorf("a rule for no tool: %v", err)
	}
}

// TestServeTrust lists serve's key once in the approvers file, and trusts
// it with the extra file's keys; Approvers reads that file back by
// default.
func TestServeTrust(t *testing.T) {
	dir := t.TempDir()
	pub := newPub(t)
	other := newPub(t)
	extra := filepath.Join(dir, "extra")
	if err := os.WriteFile(extra, []byte(other+" bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := filepath.Join(dir, "auth")
	for range 2 {
		trusted, err := ServeTrust(pub, extra, auth)
		if err != nil || !trusted.Has(pub) || !trusted.Has(other) {
			t.Fatalf("ServeTrust = %v, %v", trusted, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(auth, ApproversFile))
	if string(b) != pub+" "+ServeApproverName+"\n" {
		t.Errorf("approvers file %q, want serve's key listed once", b)
	}
	got, file, err := Approvers("", auth)
	if err != nil || file != filepath.Join(auth, ApproversFile) || !got.Has(pub) {
		t.Errorf("Approvers = %v, %s, %v", got, file, err)
	}
	if got, file, err := Approvers("", filepath.Join(dir, "none")); got != nil || file != "" || err != nil {
		t.Errorf("no approvers file: %v, %q, %v; want none", got, file, err)
	}
}

func newPub(t *testing.T) string {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}

// TestReadNamed reads the names of the keys, falls back on the auth
// directory's approvers file, and knows none without either.
func TestReadNamed(t *testing.T) {
	dir := t.TempDir()
	pub := newPub(t)
	if err := os.WriteFile(filepath.Join(dir, ApproversFile), []byte(pub+" Alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, names, err := ReadNamed("", dir)
	if err != nil || !keys.Has(pub) || names.Name(pub) != "Alice" {
		t.Errorf("ReadNamed = %v, %v, %v", keys, names, err)
	}
	if keys, names, err := ReadNamed("", ""); keys != nil || names != nil || err != nil {
		t.Errorf("no file: %v, %v, %v", keys, names, err)
	}
	bad := filepath.Join(dir, "bad")
	_ = os.WriteFile(bad, []byte("not-a-key\n"), 0o600)
	if _, _, err := ReadNamed(bad, ""); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("a bad file: %v, want its name in the error", err)
	}
}
