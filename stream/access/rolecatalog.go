package access

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// Probe message guards: no server stores a publish that carries them, and
// no JetStream API acts on a request that carries them.
const (
	// impossibleSeq is an expected last sequence no subject reaches.
	impossibleSeq = "18446744073709551615"
	// guardBody is a JSON string where JetStream wants an object or
	// nothing: every management request refuses it, in strict mode or not.
	guardBody = `"jingwei role check: refuse this request"`
	// guardAPILevel is not a number: servers that know the
	// Nats-Required-Api-Level header refuse the request before anything
	// else.
	guardAPILevel = "jingwei-role-check"
)

// guardedPublish is a JetStream publish that is never stored: its expected
// last sequences cannot match.
func guardedPublish(subject string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set("Nats-Expected-Last-Subject-Sequence", impossibleSeq)
	m.Header.Set("Nats-Expected-Last-Sequence", impossibleSeq)
	m.Header.Set("Nats-Msg-Id", "jingwei-role-check-"+nuid.Next())
	m.Data = []byte(`{"jingwei_role_check":true}`)
	return m
}

// guardedAPI is a JetStream API request JetStream refuses.
func guardedAPI(subject string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set("Nats-Required-Api-Level", guardAPILevel)
	m.Data = []byte(guardBody)
	return m
}

func reqMsg(subject, body string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte(body)
	return m
}

// ask runs a request probe.
func ask(build func() *nats.Msg) runFn {
	return func(ctx context.Context, p *prober, _ Outcome) verdict {
		v, _ := p.try(ctx, build)
		return v
	}
}

// storeProbe is a guarded JetStream publish: an answer (wrong last
// sequence, or no responders where no stream listens) means the server let
// it through; nothing is stored either way.
func storeProbe(subject string) runFn {
	return func(ctx context.Context, p *prober, _ Outcome) verdict {
		v, m := p.try(ctx, func() *nats.Msg { return guardedPublish(subject) })
		if v.got == Allowed && m != nil && apiError(m) == 0 && m.Header.Get("Status") == "" && string(m.Data) != witnessAnswer {
			// A PubAck: the guards did not hold (nothing should ever get here).
			return verdict{got: Allowed, detail: "STORED despite the expected-sequence guard: " + string(m.Data)}
		}
		return v
	}
}

func subProbe(subject string) runFn {
	return func(ctx context.Context, p *prober, _ Outcome) verdict {
		return byPermission(p.subscribe(ctx, subject))
	}
}

// pubProbe publishes without a reply; for an untrusted role the witness
// then tells whether it crossed into the trusted account.
func pubProbe(subject string) runFn {
	return func(ctx context.Context, p *prober, _ Outcome) verdict {
		build := func() *nats.Msg { return reqMsg(subject, `{"jingwei_role_check":true}`) }
		o, d := p.publish(ctx, build())
		if o != Allowed || p.role.Trusted() {
			return byPermission(o, d)
		}
		v, _ := p.crossCheck(ctx, build, false)
		return v
	}
}

// consumerProbe: where the role may, create a throw-away consumer on the
// probe session's subject, read its info, ask for a batch, ack, delete it;
// elsewhere send a guarded create, which JetStream would refuse.
func consumerProbe(stream, filter string) runFn {
	return func(ctx context.Context, p *prober, expect Outcome) verdict {
		name := "jingwei_role_check_" + nuid.Next()
		create := "$JS.API.CONSUMER.CREATE." + stream + "." + name + "." + filter
		if expect == Refused {
			v, _ := p.try(ctx, func() *nats.Msg { return guardedAPI(create) })
			return v
		}
		body, _ := json.Marshal(map[string]any{
			"stream_name": stream,
			"action":      "create",
			"config": map[string]any{
				"name": name, "durable_name": name, "filter_subject": filter,
				"ack_policy": "explicit", "deliver_policy": "all",
				// The server removes it by itself should the delete below fail.
				"inactive_threshold": int64(30 * time.Second),
			},
		})
		o, d, m := p.request(ctx, reqMsg(create, string(body)))
		if o != Allowed || apiError(m) != 0 || isNoResponders(m) {
			return byPermission(o, "create: "+d)
		}
		steps := []struct {
			what string
			msg  *nats.Msg
		}{
			{"info", reqMsg("$JS.API.CONSUMER.INFO."+stream+"."+name, "")},
			{"next", reqMsg("$JS.API.CONSUMER.MSG.NEXT."+stream+"."+name, `{"batch":1,"no_wait":true}`)},
		}
		for _, s := range steps {
			if o, d, _ := p.request(ctx, s.msg); o != Allowed {
				p.request(ctx, reqMsg("$JS.API.CONSUMER.DELETE."+stream+"."+name, ""))
				return byPermission(o, "created, but "+s.what+": "+d)
			}
		}
		// An ack of a sequence the consumer never delivered: ignored.
		if o, d := p.publish(ctx, reqMsg("$JS.ACK."+stream+"."+name+".1.1.1.0.0", "+ACK")); o != Allowed {
			p.request(ctx, reqMsg("$JS.API.CONSUMER.DELETE."+stream+"."+name, ""))
			return byPermission(o, "created, but ack: "+d)
		}
		o, d, m = p.request(ctx, reqMsg("$JS.API.CONSUMER.DELETE."+stream+"."+name, ""))
		if o != Allowed || apiError(m) != 0 {
			return byPermission(o, "created, but delete: "+d)
		}
		return verdict{got: Allowed, detail: "created, info, next, ack, deleted"}
	}
}

// respondProbe: the recoverer answers a request another role (host, else
// admin) sends on a subject only it may receive, through its response
// permission; the host's request crosses from its own account through the
// $SRV.> import. Other roles are refused already at the subscription.
func respondProbe(session string) runFn {
	return func(ctx context.Context, p *prober, _ Outcome) verdict {
		subject := "$SRV.PING." + session + "-" + nuid.Next()
		if p.role != RoleRecoverer && p.role != RoleAdmin {
			return byPermission(p.subscribe(ctx, subject))
		}
		asker := p.st.conns[RoleHost]
		if asker == nil {
			asker = p.st.witness
		}
		if asker == nil || asker == p {
			return verdict{got: Skipped, detail: "needs a host or admin connection to send the request"}
		}
		const answer = `{"jingwei_role_check":"answer"}`
		replies := make(chan string, 1)
		s, err := p.nc.Subscribe(subject, func(m *nats.Msg) {
			select {
			case replies <- m.Reply:
			default:
			}
			_ = m.Respond([]byte(answer))
		})
		if err != nil {
			return verdict{got: Failed, detail: err.Error()}
		}
		defer s.Unsubscribe()
		if o, d := p.awaitViolation(ctx, "subscribe "+subject); o != Allowed {
			return byPermission(o, "subscribe: "+d)
		}
		o, d, m := asker.request(ctx, reqMsg(subject, ""))
		if o == Allowed && string(m.Data) == answer {
			return verdict{got: Allowed, detail: fmt.Sprintf("answered %s's request (account %s)", asker.role, asker.account)}
		}
		select {
		case reply := <-replies:
			if o, v := p.awaitViolation(ctx, "publish "+reply); o == Refused {
				return byPermission(Refused, v)
			}
		default:
		}
		return verdict{got: Failed, detail: fmt.Sprintf("%s's request: %s", asker.role, d)}
	}
}

// others returns the connections of roles in accounts other than p's, the
// witness included, in the order of Roles.
func (p *prober) others() []*prober {
	var out []*prober
	for _, r := range Roles {
		q := p.st.conns[r]
		if r == RoleAdmin && q == nil {
			q = p.st.witness
		}
		if q != nil && q.account != p.account {
			out = append(out, q)
		}
	}
	return out
}

// snoopProbe: the role subscribes to _INBOX.> (which every role may) while
// a client of every other account makes a request: none of their replies
// may reach it. (The roles of one account see each other's replies: the
// trusted account's worker, recoverer, prober and admin, and the clients of one
// untrusted role.)
func snoopProbe(n names) runFn {
	return func(ctx context.Context, p *prober, _ Outcome) verdict {
		others := p.others()
		if len(others) == 0 {
			return verdict{got: Skipped, detail: "needs a connection of a role in another account"}
		}
		p.forget("subscribe _INBOX.>")
		s, err := p.nc.SubscribeSync("_INBOX.>")
		if err != nil {
			return verdict{got: Failed, detail: "subscribe _INBOX.>: " + err.Error()}
		}
		defer s.Unsubscribe()
		if o, d := p.awaitViolation(ctx, "subscribe _INBOX.>"); o != Allowed {
			return byPermission(o, "subscribe _INBOX.>: "+d)
		}
		var asked []string
		inboxes := map[string]*prober{}
		for _, q := range others {
			inbox := q.nc.NewInbox()
			inboxes[inbox] = q
			if o, d, _ := q.requestVia(ctx, reqMsg("$JS.API.STREAM.INFO."+n.events, ""), inbox); o != Allowed {
				return verdict{got: Failed, detail: fmt.Sprintf("%s's request: %s", q.role, d)}
			}
			asked = append(asked, fmt.Sprintf("%s (account %s)", q.role, q.account))
		}
		// A reply the role could see was written to its connection when it
		// was sent, before the requester had it, so before the PONG of
		// this flush: by then it is in the subscription.
		if err := p.flush(ctx); err != nil {
			return verdict{got: Failed, detail: "flush: " + err.Error()}
		}
		// Only the replies to the other accounts' requests above count:
		// the role's own account has its own replies on _INBOX.> (its
		// components' requests, the other probers of that account), and
		// seeing them is no leak.
		own := 0
		for {
			m, err := s.NextMsg(0)
			if err != nil {
				break
			}
			if q, ok := inboxes[m.Subject]; ok {
				return verdict{got: Allowed, detail: fmt.Sprintf("saw the reply to %s (account %s) on %s", q.role, q.account, m.Subject)}
			}
			own++
		}
		return verdict{got: Refused, by: RefusedIsolated, detail: fmt.Sprintf("saw none of the replies to %s (%d replies of its own account ignored)", strings.Join(asked, ", "), own)}
	}
}

// injectProbe: the role asks for stream info (which every role may) with
// the reply subject of an inbox a client of another account waits on (the
// witness for an untrusted role, an untrusted role's connection for a
// trusted one). The answer must come back to the role's own account and
// never reach the other: this is the reply-subject injection that would
// otherwise let a role have JetStream or the service publish onto any
// subject of the trusted account.
func injectProbe(n names) runFn {
	return func(ctx context.Context, p *prober, _ Outcome) verdict {
		var victim *prober
		for _, q := range p.others() {
			if q.role.Trusted() != p.role.Trusted() {
				victim = q
				break
			}
		}
		if victim == nil {
			return verdict{got: Skipped, detail: "needs a connection of a role in another account (admin's, for an untrusted role)"}
		}
		reply := victim.nc.NewInbox()
		vs, err := victim.nc.SubscribeSync(reply)
		if err != nil {
			return verdict{got: Failed, detail: "victim: " + err.Error()}
		}
		defer vs.Unsubscribe()
		if err := victim.flush(ctx); err != nil {
			return verdict{got: Failed, detail: "victim: flush: " + err.Error()}
		}
		back := make(chan struct{}, 1)
		ps, err := p.nc.Subscribe(reply, func(*nats.Msg) {
			select {
			case back <- struct{}{}:
			default:
			}
		})
		if err != nil {
			return verdict{got: Failed, detail: "subscribe: " + err.Error()}
		}
		defer ps.Unsubscribe()
		subject := "$JS.API.STREAM.INFO." + n.events
		p.forget("publish " + subject)
		m := reqMsg(subject, "")
		m.Reply = reply
		if err := p.nc.PublishMsg(m); err != nil {
			return verdict{got: Failed, detail: "publish: " + err.Error()}
		}
		stole := verdict{got: Allowed, detail: fmt.Sprintf("the answer reached %s's inbox in account %s", victim.role, victim.account)}
		t := time.NewTimer(p.timeout)
		defer t.Stop()
		for {
			if v, ok, _ := p.violation("publish " + subject); ok {
				return verdict{got: Failed, detail: "the stream info request itself was refused: " + v}
			}
			_, _, changed := p.violation("")
			select {
			case <-back:
			case <-changed:
				continue
			case <-t.C:
				// No answer in the role's own account: it went elsewhere.
				if n, _, _ := vs.Pending(); n > 0 {
					return stole
				}
				return verdict{got: Failed, detail: fmt.Sprintf("no answer within %s", p.timeout)}
			case <-ctx.Done():
				return verdict{got: Failed, detail: ctx.Err().Error()}
			}
			// The answer was sent once: a copy for the victim was written
			// to its connection before the role had its own, so before the
			// PONG of the victim's flush.
			if err := victim.flush(ctx); err != nil {
				return verdict{got: Failed, detail: "victim: flush: " + err.Error()}
			}
			if n, _, _ := vs.Pending(); n > 0 {
				return stole
			}
			return verdict{got: Refused, by: RefusedIsolated, detail: fmt.Sprintf("the answer came back to account %s; %s (account %s), waiting on the reply subject, got nothing", p.account, victim.role, victim.account)}
		}
	}
}

// catalog is every probe, with the roles that need each action (docs/protocol.md
// §4 and the permission tables in roles.go, written down independently of
// them so the check can catch a table that is wrong).
// catalogBuilder collects the catalog's probes, section by section, in
// the order the report lists them.
type catalogBuilder struct {
	n       names
	session string
	ps      []probe
}

func (c *catalogBuilder) add(action string, allowed []Role, run runFn) {
	c.ps = append(c.ps, probe{action: action, allowed: allowed, run: run})
}

// subj is the probe session's subject of a kind ("events").
func (c *catalogBuilder) subj(kind string) string { return c.n.p + "." + kind + "." + c.session }

func kvKey(bucket, key string) string { return "$KV." + bucket + "." + key }

func lastBy(subject string) string { return fmt.Sprintf(`{"last_by_subj":%q}`, subject) }

// The roles probes are allowed for.
const (
	ag, rv, ho, wk, rc, pb = RoleAgent, RoleReviewer, RoleHost, RoleWorker, RoleRecoverer, RoleProber
)

var (
	everyone = []Role{ag, rv, ho, wk, rc, pb}
	writers  = []Role{wk, rc}
	// dataReaders read the example tools' business data: the tool workers
	// and the probers (whose probes read it back).
	dataReaders = []Role{wk, pb}
)

func catalog(n names, session string) []probe {
	c := &catalogBuilder{n: n, session: session}
	// The accounts: nothing crosses from one into another but the imports.
	c.ps = append(c.ps,
		probe{action: "see another account's replies (subscribe _INBOX.>)", refusedForAdmin: true, run: snoopProbe(n)},
		probe{action: "answer lands in another account (injected reply subject)", refusedForAdmin: true, run: injectProbe(n)},
	)
	c.reading()
	c.writing()
	c.service()
	c.managing()
	c.consumers()
	c.exampleTools()
	return c.ps
}

func (c *catalogBuilder) reading() {
	n, session := c.n, c.session
	// Reading.
	c.add("account info", everyone, ask(func() *nats.Msg { return reqMsg("$JS.API.INFO", "") }))
	for _, s := range []string{n.events, n.assessments, n.plansKV, n.leasesKV} {
		c.add("stream info "+s, everyone, ask(func() *nats.Msg { return reqMsg("$JS.API.STREAM.INFO."+s, "") }))
	}
	c.add("stream info "+n.ledger, []Role{wk, rc, pb}, ask(func() *nats.Msg { return reqMsg("$JS.API.STREAM.INFO."+n.ledger, "") }))
	c.add("direct get "+n.events+" (batch, next_by_subj)", everyone, ask(func() *nats.Msg {
		return reqMsg("$JS.API.DIRECT.GET."+n.events, fmt.Sprintf(`{"seq":1,"next_by_subj":%q,"batch":2}`, c.subj("events")))
	}))
	c.add("direct get "+n.events+" last by subject", everyone, ask(func() *nats.Msg {
		return reqMsg("$JS.API.DIRECT.GET."+n.events+"."+c.subj("events"), "")
	}))
	c.add("message get "+n.events, everyone, ask(func() *nats.Msg {
		return reqMsg("$JS.API.STREAM.MSG.GET."+n.events, lastBy(c.subj("events")))
	}))
	c.add("direct get "+n.reviews, []Role{rv, ho, wk, rc}, ask(func() *nats.Msg {
		return reqMsg("$JS.API.DIRECT.GET."+n.reviews, lastBy(c.subj("reviews")))
	}))
	c.add("message get "+n.reviews, []Role{rv, ho, wk, rc}, ask(func() *nats.Msg {
		return reqMsg("$JS.API.STREAM.MSG.GET."+n.reviews, lastBy(c.subj("reviews")))
	}))
	for _, s := range [][2]string{{n.plans, "plans"}, {n.requests, "requests"}, {n.assessments, "assessments"}} {
		c.add("message get "+s[0], []Role{ho, wk, rc}, ask(func() *nats.Msg {
			return reqMsg("$JS.API.STREAM.MSG.GET."+s[0], lastBy(c.subj(s[1])))
		}))
	}
	c.add("KV get "+n.planState, []Role{ho, wk, rc}, ask(func() *nats.Msg {
		return reqMsg("$JS.API.DIRECT.GET."+n.plansKV+"."+kvKey(n.planState, session), "")
	}))
	for _, b := range []string{n.leases, n.budget} {
		c.add("KV get "+b, writers, ask(func() *nats.Msg {
			return reqMsg("$JS.API.DIRECT.GET.KV_"+b+"."+kvKey(b, session), "")
		}))
	}
	c.add("subscribe _INBOX (replies)", everyone, func(ctx context.Context, p *prober, _ Outcome) verdict {
		return byPermission(p.subscribe(ctx, p.nc.NewInbox()))
	})
	c.add("subscribe "+n.p+".events.> (core)", nil, subProbe(n.p+".events.>"))
	c.add("subscribe "+n.subj("requests")+" (core)", nil, subProbe(n.subj("requests")))
}

func (c *catalogBuilder) writing() {
	n, session := c.n, c.session
	// Writing session data (guarded: never stored).
	c.add("publish "+c.subj("requests")+" (JetStream)", []Role{ag, wk}, storeProbe(c.subj("requests")))
	c.add("publish "+c.subj("events")+" (JetStream)", writers, storeProbe(c.subj("events")))
	c.add("publish "+c.subj("plans")+" (JetStream)", []Role{rc}, storeProbe(c.subj("plans")))
	c.add("publish "+c.subj("assessments")+" (JetStream)", []Role{rc}, storeProbe(c.subj("assessments")))
	c.add("publish "+c.subj("reviews")+" (JetStream)", []Role{rv, pb}, storeProbe(c.subj("reviews")))
	c.add("publish "+c.subj("approvals")+" (JetStream)", []Role{rv}, storeProbe(c.subj("approvals")))
	c.add("publish "+c.subj("approvals")+".request (JetStream)", []Role{wk}, storeProbe(c.subj("approvals")+".request"))
	c.add("publish "+c.subj("approvals")+".stop (JetStream)", []Role{ho}, storeProbe(c.subj("approvals")+".stop"))
	for _, b := range []string{n.leases, n.planState, n.budget} {
		c.add("KV write "+b, writers, storeProbe(kvKey(b, session)))
	}
	c.add("publish _INBOX.<other client> (forged reply)", nil, pubProbe("_INBOX."+nuid.Next()))
	c.add("publish _R_.<import reply> (forged reply)", nil, pubProbe("_R_."+nuid.Next()+".x"))
}

func (c *catalogBuilder) service() {
	n, session := c.n, c.session
	// The service.
	c.add("subscribe "+n.p+".api.>", nil, subProbe(n.p+".api.>"))
	c.add("subscribe "+n.api("call"), []Role{wk}, subProbe(n.api("call")))
	c.add("subscribe "+n.api("prepare"), []Role{rc}, subProbe(n.api("prepare")))
	c.add("subscribe $SRV.>", []Role{wk, rc}, subProbe("$SRV.>"))
	c.add("answer a request (response permission)", []Role{wk, rc}, respondProbe(session))
	for _, e := range []struct {
		endpoint string
		roles    []Role
	}{
		{"call", []Role{ag}},
		{"status", []Role{ag, rv, ho}},
		{"history", []Role{ag, rv, ho}},
		{"inspect", []Role{rv, ho}},
		{"prepare", []Role{ho}},
	} {
		// A malformed body: a live service answers bad_request and does
		// nothing; "no responders" also proves the publish was let through
		// (for an untrusted role: once the witness saw it cross).
		c.add("request "+n.api(e.endpoint), e.roles, ask(func() *nats.Msg { return reqMsg(n.api(e.endpoint), guardBody) }))
	}
	c.add("request $SRV.PING (nats micro ls)", []Role{ho}, ask(func() *nats.Msg { return reqMsg("$SRV.PING."+session, "") }))
	// The tenant subjects: only a tenant's import reaches them (§4.1), so
	// the tenant the service sees is the server's word.
	for _, e := range TenantEndpoints {
		c.add("request "+n.api(e)+".<tenant> (pose as a tenant)", nil, ask(func() *nats.Msg { return reqMsg(n.api(e)+".jingwei_role_check", guardBody) }))
	}
}

func (c *catalogBuilder) managing() {
	n := c.n
	// Managing streams, buckets and their messages (admin only; guarded).
	for _, s := range []string{n.events, n.reviews, n.leasesKV, n.plansKV, n.budgetKV} {
		for _, op := range []string{"DELETE", "UPDATE", "PURGE"} {
			c.add("stream "+strings.ToLower(op)+" "+s, nil, ask(func() *nats.Msg { return guardedAPI("$JS.API.STREAM." + op + "." + s) }))
		}
	}
	c.add("stream create "+n.events, nil, ask(func() *nats.Msg { return guardedAPI("$JS.API.STREAM.CREATE." + n.events) }))
	for _, op := range []string{"DELETE", "PURGE"} {
		c.add("stream "+strings.ToLower(op)+" "+n.approvals, nil, ask(func() *nats.Msg { return guardedAPI("$JS.API.STREAM." + op + "." + n.approvals) }))
	}
	for _, s := range []string{n.reviews, n.events, n.approvals} {
		c.add("message delete "+s, nil, ask(func() *nats.Msg { return guardedAPI("$JS.API.STREAM.MSG.DELETE." + s) }))
	}
}

func (c *catalogBuilder) consumers() {
	n, session := c.n, c.session
	// Consumers.
	c.add("consumer on "+n.requests, []Role{wk}, consumerProbe(n.requests, c.subj("requests")))
	c.add("consumer on "+n.plans, []Role{wk}, consumerProbe(n.plans, c.subj("plans")))
	c.add("consumer on "+n.approvals, []Role{wk}, consumerProbe(n.approvals, c.subj("approvals")))
	c.add("consumer on "+n.events, []Role{rc}, consumerProbe(n.events, c.subj("events")))
	c.add("consumer on "+n.reviews, []Role{rc}, consumerProbe(n.reviews, c.subj("reviews")))
	c.add("consumer on "+n.assessments, []Role{pb}, consumerProbe(n.assessments, c.subj("assessments")))
	c.add("consumer on "+n.leasesKV+" (lease watcher)", []Role{rc}, consumerProbe(n.leasesKV, kvKey(n.leases, session)))
	c.add("ack on "+n.requests, []Role{wk}, pubProbe("$JS.ACK."+n.requests+".jingwei_role_check.1.1.1.0.0"))
	c.add("ack on "+n.plans+" (with domain)", []Role{wk}, pubProbe("$JS.ACK.hub.ACCHASH."+n.plans+".jingwei_role_check.1.1.1.0.0.x"))
	c.add("ack on "+n.events, []Role{rc}, pubProbe("$JS.ACK."+n.events+".jingwei_role_check.1.1.1.0.0"))
}

func (c *catalogBuilder) exampleTools() {
	n, session := c.n, c.session
	// The example tools' own stream and buckets.
	c.add("stream create "+n.ledger+" (guarded)", dataReaders, ask(func() *nats.Msg { return guardedAPI("$JS.API.STREAM.CREATE." + n.ledger) }))
	c.add("publish "+n.tp+".ledger (JetStream)", []Role{wk}, storeProbe(n.tp+".ledger"))
	c.add("publish "+n.tp+".ledger."+session+" (JetStream)", dataReaders, storeProbe(n.tp+".ledger."+session))
	c.add("message get "+n.ledger, dataReaders, ask(func() *nats.Msg {
		return reqMsg("$JS.API.STREAM.MSG.GET."+n.ledger, lastBy(n.tp+".ledger."+session))
	}))
	c.add("KV write "+n.orders, dataReaders, storeProbe(kvKey(n.orders, session)))
	c.add("KV get "+n.orders, dataReaders, ask(func() *nats.Msg {
		return reqMsg("$JS.API.DIRECT.GET."+n.ordersKV+"."+kvKey(n.orders, session), "")
	}))
	c.add("KV write "+n.orderKeys, []Role{wk}, storeProbe(kvKey(n.orderKeys, session)))
	c.add("KV get "+n.orderKeys, []Role{wk}, ask(func() *nats.Msg {
		return reqMsg("$JS.API.DIRECT.GET."+n.orderKeysKV+"."+kvKey(n.orderKeys, session), "")
	}))
	for _, op := range []string{"DELETE", "UPDATE", "PURGE"} {
		c.add("stream "+strings.ToLower(op)+" "+n.ledger, nil, ask(func() *nats.Msg { return guardedAPI("$JS.API.STREAM." + op + "." + n.ledger) }))
	}
	c.add("stream purge "+n.ordersKV, nil, ask(func() *nats.Msg { return guardedAPI("$JS.API.STREAM.PURGE." + n.ordersKV) }))
}
