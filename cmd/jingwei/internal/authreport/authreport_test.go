package authreport

import (
	"bytes"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/stream/access"
)

func TestParseRoles(t *testing.T) {
	if got, err := ParseRoles(""); got != nil || err != nil {
		t.Errorf(`ParseRoles("") = %v, %v; want every role (nil)`, got, err)
	}
	got, err := ParseRoles("agent, host")
	if err != nil || len(got) != 2 || got[0] != access.RoleAgent || got[1] != access.RoleHost {
		t.Errorf("ParseRoles = %v, %v", got, err)
	}
	if _, err := ParseRoles("agent,root"); err == nil || err.Error() != `--roles: unknown role "root"` {
		t.Errorf("an unknown role: %v", err)
	}
}

// TestWriteCheck marks a wrong probe FAIL with its detail, a skipped one
// as skipped, names the tenant and the refusal, and sums up.
func TestWriteCheck(t *testing.T) {
	rep := &access.CheckReport{URL: "nats://x", Results: []access.CheckResult{
		{Role: access.RoleAgent, Tenant: "acme", Account: "JINGWEI_TENANT_acme", Action: "call", Expect: access.Allowed, Got: access.Allowed, OK: true},
		{Role: access.RoleHost, Account: "JINGWEI_HOST", Action: "write log", Expect: access.Refused, Got: access.Allowed, Detail: "granted"},
		{Role: access.RoleReviewer, Account: "JINGWEI_REVIEWER", Action: "read", Expect: access.Refused, Got: access.Refused, RefusedBy: "permissions", OK: true},
		{Role: access.RoleWorker, Account: "JINGWEI", Action: "x", Expect: access.Allowed, Got: access.Skipped, OK: true, Detail: "no stream"},
	}}
	var b bytes.Buffer
	WriteCheck(&b, rep)
	out := b.String()
	for _, want := range []string{"agent (tenant acme)", "FAIL: granted", "refused (permissions)", "skipped: no stream", "nats://x: 1 of 4 probes NOT as expected"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	rep.Results = rep.Results[:1]
	b.Reset()
	WriteCheck(&b, rep)
	if !strings.Contains(b.String(), "all 1 probes as expected") {
		t.Errorf("all OK:\n%s", b.String())
	}
}

func TestOversizedJWTs(t *testing.T) {
	res := &access.RoleCreds{Users: []access.CredsFile{{Role: access.RoleAgent, JWTBytes: access.SafeJWTBytes}, {Role: access.RoleHost, JWTBytes: access.SafeJWTBytes + 1}}}
	got := OversizedJWTs(res)
	if len(got) != 1 || !strings.Contains(got[0], "the host JWT") {
		t.Errorf("OversizedJWTs = %q, want the host's only", got)
	}
}
