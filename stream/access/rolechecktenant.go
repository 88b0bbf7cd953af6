package access

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/stream/natsnode"
)

// checkTenants runs the tenant probes of CheckRoles: for each tenant of
// cfg.Subjects.Tenants, as the first of its agents in cfg.Dir
// (<dir>/tenants/<tenant>/<agent>.nk, or .creds with cfg.Creds), that the
// agent reaches jw.api.call and jw.api.status (carried to the trusted
// account as <subject>.<tenant>), and that the server refuses it every way
// the fleet-wide agent reads or writes sessions, and every other tenant's
// subject. A tenant without an agent key in cfg.Dir is reported as failed.
func checkTenants(ctx context.Context, cfg CheckConfig, st *checkState) ([]CheckResult, error) {
	if len(cfg.Subjects.Tenants) == 0 {
		return nil, nil
	}
	agents, err := cfg.Dir.TenantAgents()
	if err != nil {
		return nil, err
	}
	var out []CheckResult
	for _, t := range cfg.Subjects.Tenants {
		account := cfg.Subjects.TenantAccountName(t.Name)
		fail := func(detail string) {
			out = append(out, CheckResult{Role: RoleAgent, Tenant: t.Name, Account: account, Action: "connect", Expect: Allowed, Got: Failed, Detail: detail})
		}
		i := -1
		for j, a := range agents {
			if a.Tenant == t.Name {
				i = j
				break
			}
		}
		if i < 0 {
			fail(fmt.Sprintf("no agent key of tenant %s in %s", t.Name, cfg.Dir.TenantAgentSeedFile(t.Name, "<agent>")))
			continue
		}
		a := agents[i]
		cc := natsnode.ConnectConfig{URL: cfg.URL, TLSCA: cfg.TLSCA, Name: "jingwei auth check tenant " + t.Name, ConnectTimeout: cfg.Timeout, NKeySeedFile: a.Path}
		if cfg.Creds {
			cc.NKeySeedFile, cc.Creds = "", cfg.Dir.TenantAgentCredsFile(a.Tenant, a.Agent)
		}
		nc, err := natsnode.Connect(ctx, cc)
		if err != nil {
			fail(err.Error())
			continue
		}
		defer nc.Close()
		p := newProber(nc, RoleAgent, account, cfg, st)
		p.tenant = t.Name
		for _, pr := range tenantCatalog(st.n, cfg.Session, t.Name) {
			expect := Refused
			if pr.allowed {
				expect = Allowed
			}
			v := pr.run(ctx, p, expect)
			res := CheckResult{Role: RoleAgent, Tenant: t.Name, Account: account, Action: pr.action, Expect: expect, Got: v.got, OK: v.got == expect || v.got == Skipped, Detail: v.detail}
			if v.got == Refused {
				res.RefusedBy = v.by
			}
			out = append(out, res)
		}
	}
	return out, nil
}

// tenantProbe is one action tried as a tenant's agent.
type tenantProbe struct {
	action  string
	allowed bool
	run     runFn
}

// tenantCatalog is every probe of a tenant's agent: the services it
// needs, and what the fleet-wide agent may and a tenant must not
// (docs/protocol.md §4).
func tenantCatalog(n names, session, tenant string) []tenantProbe {
	subj := func(kind string) string { return n.p + "." + kind + "." + session }
	var ps []tenantProbe
	add := func(action string, allowed bool, run runFn) {
		ps = append(ps, tenantProbe{action: action, allowed: allowed, run: run})
	}
	for _, e := range TenantEndpoints {
		add("request "+n.api(e)+" (reaches "+n.api(e)+"."+tenant+")", true, ask(func() *nats.Msg { return reqMsg(n.api(e), guardBody) }))
	}
	add("see another account's replies (subscribe _INBOX.>)", false, snoopProbe(n))
	add("account info", false, ask(func() *nats.Msg { return reqMsg("$JS.API.INFO", "") }))
	add("stream info "+n.events+" (subjects filter: every session id)", false, ask(func() *nats.Msg {
		return reqMsg("$JS.API.STREAM.INFO."+n.events, `{"subjects_filter":">"}`)
	}))
	add("direct get "+n.events+" (batch: every session's last event)", false, ask(func() *nats.Msg {
		return reqMsg("$JS.API.DIRECT.GET."+n.events, fmt.Sprintf(`{"multi_last":[%q],"batch":2}`, n.p+".events.>"))
	}))
	add("direct get "+n.events+" last by subject", false, ask(func() *nats.Msg {
		return reqMsg("$JS.API.DIRECT.GET."+n.events+"."+subj("events"), "")
	}))
	add("message get "+n.events, false, ask(func() *nats.Msg { return reqMsg("$JS.API.STREAM.MSG.GET."+n.events, lastBy(subj("events"))) }))
	add("message get "+n.answers, false, ask(func() *nats.Msg { return reqMsg("$JS.API.STREAM.MSG.GET."+n.answers, lastBy(subj("answers"))) }))
	add("publish "+subj("requests")+" (JetStream)", false, storeProbe(subj("requests")))
	for _, e := range TenantEndpoints {
		add("request "+n.api(e)+"."+tenant+" (choose the tenant)", false, ask(func() *nats.Msg { return reqMsg(n.api(e)+"."+tenant, guardBody) }))
		add("request "+n.api(e)+".other (another tenant)", false, ask(func() *nats.Msg { return reqMsg(n.api(e)+".other", guardBody) }))
	}
	for _, e := range []string{"inspect", "prepare"} {
		add("request "+n.api(e), false, ask(func() *nats.Msg { return reqMsg(n.api(e), guardBody) }))
	}
	add("request $SRV.PING", false, ask(func() *nats.Msg { return reqMsg("$SRV.PING", "") }))
	add("subscribe "+n.p+".api.>", false, subProbe(n.p+".api.>"))
	add("subscribe "+n.p+".events.> (core)", false, subProbe(n.p+".events.>"))
	add("publish _INBOX.<other client> (forged reply)", false, pubProbe("_INBOX.x"))
	add("publish _R_.<import reply> (forged reply)", false, pubProbe("_R_.x.x"))
	return ps
}
