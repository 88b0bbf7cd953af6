package access

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/jingwei/jingwei/schema"

	"github.com/jingwei/jingwei/stream"
)

// Role is one kind of jingwei client (docs/protocol.md §4). Every client connects as
// exactly one role, and the NATS server's permissions, not the client's
// manners, keep it to that role's subjects.
type Role string

// The roles.
const (
	// RoleAgent publishes tool requests, calls jw.api.call and
	// jw.api.status, and reads session events, of every session: the
	// fleet-wide agent, for one agent or a fleet that trusts itself.
	// Agents that must not see each other's sessions are given tenant
	// credentials instead (Tenant, KeyDir.AddTenantAgent). Untrusted: an
	// account of its own.
	RoleAgent Role = "agent"
	// RoleReviewer (also the approver) publishes reviews, calls
	// jw.api.status and jw.api.inspect, and reads session events and
	// reviews. Untrusted: an account of its own.
	RoleReviewer Role = "reviewer"
	// RoleHost (the operator) prepares retries, calls status and inspect,
	// reads every jingwei stream and the plans bucket, and lists the
	// service with `nats micro`. Untrusted: an account of its own.
	RoleHost Role = "host"
	// RoleWorker (a tool worker) appends to session logs, writes leases,
	// budgets and plan state, consumes requests and plans, serves
	// jw.api.call (forwarding its requests to the work queue), and keeps
	// the example tools' own buckets and stream. Trusted: shares the
	// account that holds JetStream.
	RoleWorker Role = "worker"
	// RoleRecoverer (the recovery worker) fences sessions, publishes
	// assessments and plans, consumes events and reviews, and answers
	// jw.api.inspect, jw.api.prepare and jw.api.status. Trusted.
	RoleRecoverer Role = "recoverer"
	// RoleProber (package worker/prober) reads the session logs of the
	// calls it probes, runs the example tools' read-only probes (which
	// read the tools' business data and raise its fences: ledger markers,
	// order keys) and publishes its signed automated reviews. It calls no
	// service, and publishes no events, plans, assessments or approvals.
	// Trusted: it reads JetStream directly, in the account that holds it.
	RoleProber Role = "prober"
	// RoleAdmin may do everything, and is the only role that creates,
	// updates, deletes or purges jingwei's streams and buckets. Trusted.
	RoleAdmin Role = "admin"
)

// Roles lists every role, in the order tables and reports use.
var Roles = []Role{RoleAgent, RoleReviewer, RoleHost, RoleWorker, RoleRecoverer, RoleProber, RoleAdmin}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// DefaultToolsPrefix is the example tools' default prefix (tools.Config).
const DefaultToolsPrefix = "tools"

// DefaultResponseExpiry is how long the services may take to answer a
// request (RoleConfig.ResponseExpiry): nats-server's own default, and well
// above the tool workers' 30 s call timeout.
const DefaultResponseExpiry = 2 * time.Minute

// RoleConfig says which subjects the roles' permissions name. The zero value
// is usable: it describes the default topology.
type RoleConfig struct {
	// Prefix is jingwei's subject prefix (TopologyConfig.Prefix). Defaults
	// to "jw".
	Prefix string
	// ToolsPrefix is the example tools' prefix (tools.Config.Prefix): the
	// worker keeps buckets <prefix>_orders and <prefix>_order_keys and
	// stream <PREFIX>_LEDGER on <prefix>.ledger. Defaults to "tools".
	ToolsPrefix string
	// ResponseExpiry is how long after a request arrives a service (the
	// recoverer, a tool worker's gateway) may
	// still answer it (nats allow_responses expires; one answer per
	// request; also the response threshold of the jw.api.* exports). It
	// must exceed the tool workers' CallTimeout. Defaults to
	// DefaultResponseExpiry.
	ResponseExpiry time.Duration
	// Account names the trusted account, which holds JetStream and the
	// worker, recoverer, prober and admin users; the untrusted roles' accounts are
	// named after it (AccountName: <Account>_AGENT, _REVIEWER, _HOST).
	// [A-Za-z0-9_-]. Defaults to DefaultAccount ("JINGWEI").
	Account string
	// Tenants are the tenants of tenant-scoped agents (see Tenant): each
	// gets an account of its own (TenantAccountName) importing only
	// jw.api.call and jw.api.status for its own sessions. Nil: no tenants
	// (and the trusted account exports nothing for them).
	Tenants []Tenant
}

// WithDefaults returns c with zero fields set to their defaults.
func (c RoleConfig) WithDefaults() RoleConfig {
	if c.Prefix == "" {
		c.Prefix = stream.DefaultPrefix
	}
	if c.ToolsPrefix == "" {
		c.ToolsPrefix = DefaultToolsPrefix
	}
	if c.ResponseExpiry <= 0 {
		c.ResponseExpiry = DefaultResponseExpiry
	}
	if c.Account == "" {
		c.Account = DefaultAccount
	}
	return c
}

// Validate reports a prefix that is not a subject token of [A-Za-z0-9_-].
func (c RoleConfig) Validate() error {
	c = c.WithDefaults()
	if !schema.ValidSession(c.Prefix) {
		return fmt.Errorf("stream: RoleConfig.Prefix %q: want [A-Za-z0-9_-]+", c.Prefix)
	}
	if !schema.ValidSession(c.ToolsPrefix) {
		return fmt.Errorf("stream: RoleConfig.ToolsPrefix %q: want [A-Za-z0-9_-]+", c.ToolsPrefix)
	}
	if !schema.ValidSession(c.Account) {
		return fmt.Errorf("stream: RoleConfig.Account %q: want [A-Za-z0-9_-]+", c.Account)
	}
	return validateTenants(c.Tenants)
}

// Op is what a Grant is about: publishing or subscribing.
type Op string

// The operations a Grant names.
const (
	OpPublish   Op = "publish"
	OpSubscribe Op = "subscribe"
)

// Grant is one line of a role's permission table: subjects the role may
// publish or subscribe to (or, with Deny, never may, whatever else is
// allowed), and why.
type Grant struct {
	// Op is OpPublish or OpSubscribe.
	Op Op `json:"op"`
	// Deny makes the subjects a deny list entry; deny wins over allow.
	Deny bool `json:"deny,omitempty"`
	// Subjects are NATS subjects, wildcards allowed.
	Subjects []string `json:"subjects"`
	// Why says what the entry is for (an allow) or what attack it stops
	// (a deny).
	Why string `json:"why"`
}

// RolePermissions is a role's permissions as plain subject lists, the form
// server.Permissions, jwt.Permissions and the nats-server configuration
// text are made from.
type RolePermissions struct {
	// Role is the role.
	Role Role `json:"role"`
	// PublishAllow, PublishDeny, SubscribeAllow and SubscribeDeny are the
	// subject lists, sorted, without duplicates.
	PublishAllow   []string `json:"publish_allow"`
	PublishDeny    []string `json:"publish_deny,omitempty"`
	SubscribeAllow []string `json:"subscribe_allow"`
	SubscribeDeny  []string `json:"subscribe_deny,omitempty"`
	// Responses, when set, lets the role publish one answer to the reply
	// subject of each message it receives within ResponseExpiry (nats
	// allow_responses), whatever the publish lists say.
	Responses bool `json:"responses,omitempty"`
	// ResponseExpiry is RoleConfig.ResponseExpiry when Responses is set.
	ResponseExpiry time.Duration `json:"response_expiry,omitempty"`
}

// names are the streams, buckets and subjects of one RoleConfig.
type names struct {
	p, tp string
	// jingwei's streams and its buckets' streams.
	events, requests, reviews, plans, assessments, answers string
	approvals                                              string
	leasesKV, plansKV, budgetKV                            string // KV_<bucket>
	leases, planState, budget                              string // bucket names
	// the example tools' stream and buckets' streams.
	ledger, ordersKV, orderKeysKV string
	orders, orderKeys             string
}

func (c RoleConfig) names() names {
	c = c.WithDefaults()
	n := names{p: c.Prefix, tp: c.ToolsPrefix}
	n.events, n.requests = stream.StreamName(n.p, "EVENTS"), stream.StreamName(n.p, "REQUESTS")
	n.reviews, n.plans = stream.StreamName(n.p, "REVIEWS"), stream.StreamName(n.p, "PLANS")
	n.assessments, n.answers = stream.StreamName(n.p, "ASSESSMENTS"), stream.StreamName(n.p, "ANSWERS")
	n.approvals = stream.StreamName(n.p, "APPROVALS")
	n.leases, n.planState, n.budget = n.p+"_leases", n.p+"_plans", n.p+"_budget"
	n.leasesKV, n.plansKV, n.budgetKV = "KV_"+n.leases, "KV_"+n.planState, "KV_"+n.budget
	// tools.New names its stream strings.ToUpper(prefix)+"_LEDGER".
	n.ledger = strings.ToUpper(n.tp) + "_LEDGER"
	n.orders, n.orderKeys = n.tp+"_orders", n.tp+"_order_keys"
	n.ordersKV, n.orderKeysKV = "KV_"+n.orders, "KV_"+n.orderKeys
	return n
}

func (n names) subj(kind string) string { return n.p + "." + kind + ".*" }
func (n names) api(endpoint string) string {
	return stream.APISubject(n.p, endpoint)
}
func (n names) jingweiStreams() []string {
	return []string{n.events, n.requests, n.reviews, n.plans, n.assessments, n.answers, n.approvals}
}
func (n names) jingweiBuckets() []string { return []string{n.leasesKV, n.plansKV, n.budgetKV} }

// each applies f to every stream and concatenates the results.
func each(streams []string, f func(string) []string) []string {
	var out []string
	for _, s := range streams {
		out = append(out, f(s)...)
	}
	return out
}

// get is every way to read one message of a stream: direct gets (by body,
// batched, and last-by-subject in the subject) and message gets (what
// nats.go uses where the stream does not allow direct gets).
func get(s string) []string {
	return []string{"$JS.API.DIRECT.GET." + s, "$JS.API.DIRECT.GET." + s + ".>", "$JS.API.STREAM.MSG.GET." + s}
}

// getKV is get for a KV bucket's stream: buckets always allow direct gets,
// which is all kv.Get uses (last-by-subject, or by revision).
func getKV(s string) []string {
	return []string{"$JS.API.DIRECT.GET." + s, "$JS.API.DIRECT.GET." + s + ".>"}
}

// consume is what the owner of a stream's consumers needs: every consumer
// request on the stream (create, update, info, delete, pause, and the rest
// of $JS.API.CONSUMER.<op>.<stream>.>), the next-batch request of a pull
// consumer, and the acks (+ACK, -NAK, +TERM, +WPI) with and without a
// JetStream domain in the ack subject.
func consume(s string) []string {
	return []string{
		"$JS.API.CONSUMER.*." + s + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + s + ".>",
		"$JS.ACK." + s + ".>",
		"$JS.ACK.*.*." + s + ".>",
	}
}

// watch is consume plus the flow-control answers of a push consumer: what a
// nats.go KV watcher (kv.Keys, kv.Watch) takes.
func watch(s string) []string {
	return append(consume(s), "$JS.FC."+s+".>", "$JS.FC.*.*."+s+".>")
}

// anyConsumer is every consumer request on one stream that creates,
// changes, deletes or reads messages through a consumer (create, durable
// create, delete, next, stepdown) and every ack subject of its consumers;
// consumer info, names and list (read-only) are not in it.
func anyConsumer(s string) []string {
	return []string{
		"$JS.API.CONSUMER.CREATE." + s,
		"$JS.API.CONSUMER.CREATE." + s + ".>",
		"$JS.API.CONSUMER.DELETE." + s + ".>",
		"$JS.API.CONSUMER.*.*." + s + ".>",
		"$JS.ACK." + s + ".>",
		"$JS.ACK.*.*." + s + ".>",
	}
}

// streamChanges is every request that changes any stream or removes its
// messages, whatever its name: update, delete, purge, message delete.
var streamChanges = []string{
	"$JS.API.STREAM.UPDATE.*",
	"$JS.API.STREAM.DELETE.*",
	"$JS.API.STREAM.PURGE.*",
	"$JS.API.STREAM.MSG.DELETE.*",
}

func pub(why string, subjects ...string) Grant {
	return Grant{Op: OpPublish, Subjects: subjects, Why: why}
}
func sub(why string, subjects ...string) Grant {
	return Grant{Op: OpSubscribe, Subjects: subjects, Why: why}
}

// allows is each role's table of what it needs. An untrusted role may
// publish exactly what its account imports (importGrants) and receive its
// replies; the trusted roles' tables name the subjects of their one
// account.
func (n names) allows(r Role, c RoleConfig) []Grant {
	if !r.Trusted() {
		return append(n.importGrants(r, c),
			sub("replies: PubAcks, JetStream API answers, service answers (in the role's own account: no other account's replies reach it)", "_INBOX.>"))
	}
	// The worker, the recoverer and the prober.
	base := []Grant{
		sub("replies: PubAcks, JetStream API answers, service answers, pull consumer batches", "_INBOX.>"),
		pub("account info (nats.go CreateKeyValue asks for it; `nats account info`)", "$JS.API.INFO"),
		pub("stream and bucket info (OpenTopology, js.Stream, js.KeyValue, kv.Status): read-only metadata", "$JS.API.STREAM.INFO.*"),
	}
	switch r {
	case RoleWorker:
		return append(base,
			pub("append to session logs (fenced appends, JetStream)", n.subj("events")),
			pub("leases, budgets and plan state: KV create, update, delete, renew", "$KV."+n.leases+".>", "$KV."+n.budget+".>", "$KV."+n.planState+".>"),
			pub("read every stream of the account but the approvals (the worker takes those from its consumer; a deny below): direct and message gets (kv.Get uses direct gets); three wildcards rather than a subject per stream and bucket keep the user's JWT under the server's control-line limit (SafeJWTBytes)",
				"$JS.API.DIRECT.GET.*", "$JS.API.DIRECT.GET.*.>", "$JS.API.STREAM.MSG.GET.*"),
			pub("durable pull consumers on the request queue and the plan log", append(consume(n.requests), consume(n.plans)...)...),
			pub("example tools: create their buckets and stream if missing (never update, delete or purge)",
				"$JS.API.STREAM.CREATE."+n.ledger, "$JS.API.STREAM.CREATE."+n.ordersKV, "$JS.API.STREAM.CREATE."+n.orderKeysKV),
			pub("example tools: writes (their reads are among the gets above)", n.tp+".ledger", n.tp+".ledger.>", "$KV."+n.orders+".>", "$KV."+n.orderKeys+".>"),
			pub("answers to requests that cannot become calls (JetStream)", n.subj("answers")),
			pub("forward jw.api.call requests to the work queue (JetStream)", n.subj("requests")),
			pub("tell the gateway that forwarded a request where its tool.call is (a hint it checks against the log)", n.p+".gateway.>"),
			sub("serve jw.api.call (the gateway; jw.api.call.<tenant>: a tenant's agents, through their account's import) and micro's $SRV discovery, and hear the tool workers' hints about the gateway's calls", n.api("call"), n.api("call")+".*", "$SRV.>", n.p+".gateway.>"),
			pub("approval requests of calls waiting for approval (JetStream), and the durable consumer of the answers", append([]string{n.p + ".approvals.*.request"}, consume(n.approvals)...)...),
		)
	case RoleRecoverer:
		return append(base,
			pub("fences on session logs (session.fenced)", n.subj("events")),
			pub("assessments and retry plans", n.subj("assessments"), n.subj("plans")),
			pub("leases, budgets and plan state: KV create, update, delete", "$KV."+n.leases+".>", "$KV."+n.budget+".>", "$KV."+n.planState+".>"),
			pub("read everything: direct and message gets of any stream of the account (three wildcards rather than a subject per stream and bucket keep the user's JWT under the server's control-line limit, SafeJWTBytes)", "$JS.API.DIRECT.GET.*", "$JS.API.DIRECT.GET.*.>", "$JS.API.STREAM.MSG.GET.*"),
			pub("durable consumers on the session logs and the reviews (classifier, review checks)", append(consume(n.events), consume(n.reviews)...)...),
			pub("lease expiry watcher: an ordered pull consumer on the leases bucket (WatchLeaseExpiry)", consume(n.leasesKV)...),
			pub("plan key listing: kv.Keys, a push watcher with flow control, on the plans bucket", watch(n.plansKV)...),
			pub("whether the tool workers' plan consumer still holds a plan's message (a lost one is published again): consumer info only", "$JS.API.CONSUMER.INFO."+n.plans+".*"),
			sub("serve the jingwei service (inspect, prepare, status, history; jw.api.status.<tenant>, jw.api.history.<tenant>: a tenant's agents, through their account's import) and micro's $SRV discovery", n.api("inspect"), n.api("prepare"), n.api("status"), n.api("status")+".*", n.api("history"), n.api("history")+".*", "$SRV.>"),
			sub("the server's stream advisories: a protected stream created, deleted or updated is noticed at once (stream.ProtectedStreams)", "$JS.EVENT.ADVISORY.STREAM.>"),
		)
	case RoleProber:
		return append(base,
			pub("read the session logs of the calls it probes (the call, the fence that closed it): direct and message gets of the session logs only", get(n.events)...),
			pub("a prober with a consumer of its own (Prober.Run) hears of uncertain calls from the assessments: a durable pull consumer on them", consume(n.assessments)...),
			pub("example tools: open their buckets and stream, creating them if missing as tools.New does (never update, delete or purge)",
				"$JS.API.STREAM.CREATE."+n.ledger, "$JS.API.STREAM.CREATE."+n.ordersKV, "$JS.API.STREAM.CREATE."+n.orderKeysKV),
			pub("the probes' reads of the tools' business data: the ledger (payments.lookup) and the orders (orders.lookup)",
				append(get(n.ledger), getKV(n.ordersKV)...)...),
			pub("the probes' fence raises before they look: a marker on the session's ledger subject, the order's key rewritten at the session's epoch (never the unfenced legacy subject "+n.tp+".ledger)",
				n.tp+".ledger.>", "$KV."+n.orders+".>"),
			pub("its signed automated reviews (JetStream)", n.subj("reviews")),
		)
	case RoleAdmin:
		return []Grant{
			pub("everything: create, update, delete and purge streams and buckets", ">"),
			sub("everything", ">"),
		}
	}
	return nil
}

// guard is a rule that must hold whatever the allow tables say: its
// subjects are denied to the trusted roles but admin and the owners. The
// untrusted roles need none: they are in accounts of their own, which hold
// only their imports, and their allow lists name exact subjects.
type guard struct {
	Grant
	owners []Role
}

func (n names) guards() []guard {
	g := func(op Op, why string, subjects []string, owners ...Role) guard {
		return guard{Grant: Grant{Op: op, Deny: true, Subjects: subjects, Why: why}, owners: owners}
	}
	return []guard{
		g(OpPublish, "only admin updates, deletes or purges a stream or bucket (jingwei's, the example tools', any), or deletes a message from one",
			streamChanges),
		g(OpPublish, "only admin creates streams and buckets (workers and probers may create the example tools' three, by name, nothing else)",
			[]string{"$JS.API.STREAM.CREATE.*"}, RoleWorker, RoleProber),
		g(OpPublish, "session logs are written by tool workers and (fences) the recoverer only", []string{n.p + ".events.>"}, RoleWorker, RoleRecoverer),
		g(OpPublish, "plans and assessments come from the recoverer only", []string{n.p + ".plans.>", n.p + ".assessments.>"}, RoleRecoverer),
		g(OpPublish, "answers to refused requests come from tool workers only", []string{n.p + ".answers.>"}, RoleWorker),
		g(OpPublish, "reviews come from reviewers and (signed automated reviews) probers only", []string{n.p + ".reviews.>"}, RoleReviewer, RoleProber),
		g(OpPublish, "approvals and denials come from approvers (the reviewer role) only (the worker's allows name only the request subject)", []string{n.p + ".approvals.*"}, RoleReviewer, RoleWorker),
		g(OpPublish, "approval requests come from tool workers only", []string{n.p + ".approvals.*.request"}, RoleWorker),
		g(OpPublish, "task stops come from hosts only", []string{n.p + ".approvals.*.stop"}),
		g(OpPublish, "leases, budgets and plan state are written by workers and the recoverer only",
			[]string{"$KV." + n.leases + ".>", "$KV." + n.budget + ".>", "$KV." + n.planState + ".>"}, RoleWorker, RoleRecoverer),
		g(OpPublish, "nobody publishes on reply inboxes or the reply subjects of the imports (_R_.…): a forged PubAck or service answer (the services answer through their response permission, which this deny does not block)",
			[]string{"_INBOX.>", "_R_.>"}),
		g(OpPublish, "consumers of the work queue and the plan log belong to workers (an ack deletes a request, a term strands a plan, an update redirects them)",
			append(append(anyConsumer(n.requests), anyConsumer(n.plans)...), anyConsumer(n.approvals)...), RoleWorker),
		g(OpPublish, "consumers of the session logs and the reviews belong to the recoverer",
			append(anyConsumer(n.events), anyConsumer(n.reviews)...), RoleRecoverer),
		g(OpPublish, "the approvals are read through the tool workers' consumer, never by message or direct gets (the recoverer reads them)",
			get(n.approvals), RoleRecoverer),
		g(OpPublish, "the example tools' business data (orders, order keys, the ledger) is read by the tool workers and the probers (their probes) only",
			append(get(n.ledger), append(getKV(n.ordersKV), getKV(n.orderKeysKV)...)...), RoleWorker, RoleProber),
		g(OpSubscribe, "only the tool workers receive jw.api.call (anyone else could answer someone else's call)",
			[]string{n.api("call"), n.api("call") + ".*"}, RoleWorker),
		g(OpSubscribe, "only the recoverer receives inspect, prepare, status and history requests",
			[]string{n.api("inspect"), n.api("prepare"), n.api("status"), n.api("status") + ".*", n.api("history"), n.api("history") + ".*"}, RoleRecoverer),
	}
}

// Grants returns the role's permission table inside its account
// (AccountName): what it needs (allows), then, for the worker and the
// recoverer, the rules that hold whatever the allows say (denies). An
// untrusted role's allows are exactly its account's imports (Imports) and
// its replies. An unknown role gets a table that denies everything.
func (c RoleConfig) Grants(r Role) []Grant {
	if !r.Valid() {
		return []Grant{
			{Op: OpPublish, Deny: true, Subjects: []string{">"}, Why: "unknown role"},
			{Op: OpSubscribe, Deny: true, Subjects: []string{">"}, Why: "unknown role"},
		}
	}
	c = c.WithDefaults()
	n := c.names()
	out := n.allows(r, c)
	if r == RoleAdmin || !r.Trusted() {
		return out
	}
	for _, g := range n.guards() {
		if !slices.Contains(g.owners, r) {
			out = append(out, g.Grant)
		}
	}
	return out
}

// Subjects returns the role's permissions as sorted subject lists.
func (c RoleConfig) Subjects(r Role) RolePermissions {
	c = c.WithDefaults()
	p := subjectsOf(r, c.Grants(r))
	if r == RoleRecoverer || r == RoleWorker {
		p.Responses, p.ResponseExpiry = true, c.ResponseExpiry
	}
	return p
}

// subjectsOf sorts a permission table into subject lists.
func subjectsOf(r Role, grants []Grant) RolePermissions {
	p := RolePermissions{Role: r}
	for _, g := range grants {
		var l *[]string
		switch {
		case g.Op == OpPublish && !g.Deny:
			l = &p.PublishAllow
		case g.Op == OpPublish:
			l = &p.PublishDeny
		case !g.Deny:
			l = &p.SubscribeAllow
		default:
			l = &p.SubscribeDeny
		}
		*l = append(*l, g.Subjects...)
	}
	for _, l := range []*[]string{&p.PublishAllow, &p.PublishDeny, &p.SubscribeAllow, &p.SubscribeDeny} {
		slices.Sort(*l)
		*l = slices.Compact(*l)
	}
	return p
}

// Permissions returns the role's permissions for a nats-server user
// (server.User, server.NkeyUser). An unknown role gets permissions that
// deny everything (never nil, which would allow everything).
func (c RoleConfig) Permissions(r Role) *server.Permissions {
	p := c.Subjects(r)
	sp := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.PublishAllow, Deny: p.PublishDeny},
		Subscribe: &server.SubjectPermission{Allow: p.SubscribeAllow, Deny: p.SubscribeDeny},
	}
	if p.Responses {
		sp.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: p.ResponseExpiry}
	}
	return sp
}

// JWTPermissions returns the role's permissions for a user JWT in operator
// mode (jwt.UserClaims.Permissions). A deny that no allow of the same list
// can reach changes nothing (with an allow list, what it does not allow is
// refused anyway) and is left out, so the JWT stays short enough for the
// CONNECT line (SafeJWTBytes); a deny that overlaps an allow is always
// kept. An unknown role gets permissions that deny everything.
func (c RoleConfig) JWTPermissions(r Role) jwt.Permissions {
	p := c.Subjects(r)
	jp := jwt.Permissions{
		Pub: jwt.Permission{Allow: p.PublishAllow, Deny: effectiveDenies(p.PublishAllow, p.PublishDeny)},
		Sub: jwt.Permission{Allow: p.SubscribeAllow, Deny: effectiveDenies(p.SubscribeAllow, p.SubscribeDeny)},
	}
	if p.Responses {
		jp.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: p.ResponseExpiry}
	}
	return jp
}

// effectiveDenies returns the denies that overlap at least one allow; with
// no allows (everything allowed) every deny counts.
func effectiveDenies(allow, deny []string) []string {
	if len(allow) == 0 {
		return deny
	}
	var out []string
	for _, d := range deny {
		if slices.ContainsFunc(allow, func(a string) bool { return subjectsOverlap(a, d) }) {
			out = append(out, d)
		}
	}
	return out
}

// subjectsOverlap reports whether some subject matches both patterns.
func subjectsOverlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		if i == len(at) || i == len(bt) {
			return len(at) == len(bt)
		}
		x, y := at[i], bt[i]
		if x == ">" || y == ">" {
			return true
		}
		if x != "*" && y != "*" && x != y {
			return false
		}
	}
}
