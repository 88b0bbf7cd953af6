package access

import (
	"strings"
	"time"
)

// How the roles are split into NATS accounts.
//
// Subject permissions inside one account cannot stop everything: the server
// does not check a message's reply subject against the publisher's
// permissions, and JetStream (or the recoverer, through its response
// permission) answers on that reply subject with the full rights of the
// account, so an agent could have a PubAck stored in a bucket or a session
// log; and every client of an account that may subscribe to _INBOX.> sees
// the replies of every other client of that account.
//
// So the trusted components (worker, recoverer, prober, admin) share one account
// (RoleConfig.Account, "JINGWEI"), which holds JetStream and every stream
// and bucket, and each untrusted role (agent, reviewer, host) has an account
// of its own without JetStream, which imports from the trusted account
// exactly the services that role uses (RoleConfig.Imports). A service
// import rewrites the reply subject (the trusted account answers on a
// _R_.… subject the server maps back), so an answer always lands in the
// requester's own account, where no stream listens; and no untrusted
// account can see another account's subjects, inboxes included.

// ResponseType says how many answers a service import carries back (the
// response type of the nats service export).
type ResponseType string

// The response types.
const (
	// ResponseSingleton carries one answer: a PubAck, a JetStream API
	// answer, a service reply.
	ResponseSingleton ResponseType = "singleton"
	// ResponseStream carries many answers, until the response threshold:
	// a batched direct get (a stream of messages ending in an EOB status),
	// $SRV.PING with many responders.
	ResponseStream ResponseType = "stream"
)

// StreamedResponseWindow is the response threshold of the imports with
// ResponseStream: how long after a request its answers may still come
// back. A batched direct get or a $SRV.PING is answered at once; the
// window only bounds how long the server keeps the reply mapping.
const StreamedResponseWindow = 10 * time.Second

// ServiceImport is one service an untrusted role's account imports from the
// trusted account, under the same subject in both accounts.
type ServiceImport struct {
	// Subject is the service's subject in the trusted account (wildcards
	// allowed).
	Subject string `json:"subject"`
	// To, when set, is the subject the importing account publishes on,
	// which the server maps to Subject (a tenant's jw.api.call, carried
	// into the trusted account as jw.api.call.<tenant>). Empty: Subject in
	// both accounts.
	To string `json:"to,omitempty"`
	// Response is the response type: ResponseSingleton or ResponseStream.
	Response ResponseType `json:"response"`
	// Threshold is how long after a request the trusted account may still
	// answer it (nats response_threshold). Zero: the server's default
	// (2 minutes).
	Threshold time.Duration `json:"threshold,omitempty"`
	// Why says what the role uses it for.
	Why string `json:"why"`
}

// ServiceExport is one service the trusted account exports, and the
// accounts that import it.
type ServiceExport struct {
	ServiceImport
	// Accounts are the importing accounts' names, in the order of Roles.
	Accounts []string `json:"accounts"`
}

// AccountSpec is one NATS account of the roles.
type AccountSpec struct {
	// Name is the account's name (RoleConfig.AccountName).
	Name string `json:"name"`
	// Roles are the roles whose users live in the account, in the order of
	// Roles.
	Roles []Role `json:"roles"`
	// JetStream is set for the trusted account, which holds the streams
	// and buckets; the untrusted accounts have no JetStream of their own.
	JetStream bool `json:"jetstream,omitempty"`
	// Exports are the trusted account's services (nil elsewhere).
	Exports []ServiceExport `json:"exports,omitempty"`
	// Imports are what an untrusted account imports from the trusted one
	// (nil for the trusted account).
	Imports []ServiceImport `json:"imports,omitempty"`
	// Tenant is the tenant whose agents the account holds (Roles is then
	// empty); "" for the roles' accounts.
	Tenant string `json:"tenant,omitempty"`
}

// DefaultAccount is the trusted account's default name (RoleConfig.Account).
const DefaultAccount = "JINGWEI"

// Trusted reports whether r is one of the trusted roles (worker, recoverer,
// prober, admin) that share the account holding JetStream. The others
// (agent, reviewer, host) each have an account of their own. An unknown
// role is not trusted.
func (r Role) Trusted() bool {
	return r == RoleWorker || r == RoleRecoverer || r == RoleProber || r == RoleAdmin
}

// AccountName returns the name of r's account: RoleConfig.Account for the
// trusted roles, <Account>_AGENT, <Account>_REVIEWER and <Account>_HOST for
// the others ("JINGWEI_AGENT" with the defaults). An unknown role has no
// account: "".
func (c RoleConfig) AccountName(r Role) string {
	c = c.WithDefaults()
	switch {
	case !r.Valid():
		return ""
	case r.Trusted():
		return c.Account
	}
	return c.Account + "_" + strings.ToUpper(string(r))
}

// importGroup is one group of a role's imports that serve one purpose.
type importGroup struct {
	why  string
	imps []ServiceImport
}

func single(subjects ...string) []ServiceImport {
	out := make([]ServiceImport, len(subjects))
	for i, s := range subjects {
		out[i] = ServiceImport{Subject: s, Response: ResponseSingleton}
	}
	return out
}

// reads are the imports that read one stream: the message get (the
// leader's view of a tail), the batched direct get with a JSON body (a
// stream of messages and an EOB status) and the last-by-subject direct get
// with the subject in the request subject (one message).
func reads(streams ...string) []ServiceImport {
	var out []ServiceImport
	for _, s := range streams {
		out = append(out,
			ServiceImport{Subject: "$JS.API.STREAM.MSG.GET." + s, Response: ResponseSingleton},
			ServiceImport{Subject: "$JS.API.DIRECT.GET." + s, Response: ResponseStream, Threshold: StreamedResponseWindow},
			ServiceImport{Subject: "$JS.API.DIRECT.GET." + s + ".>", Response: ResponseSingleton},
		)
	}
	return out
}

// kvReads are the imports that read a KV bucket's stream: kv.Get (last by
// subject, in the request subject) and kv.GetRevision (a body).
func kvReads(s string) []ServiceImport {
	return []ServiceImport{
		{Subject: "$JS.API.DIRECT.GET." + s, Response: ResponseStream, Threshold: StreamedResponseWindow},
		{Subject: "$JS.API.DIRECT.GET." + s + ".>", Response: ResponseSingleton},
	}
}

func (n names) importGroups(r Role, c RoleConfig) []importGroup {
	api := func(endpoints ...string) []ServiceImport {
		out := make([]ServiceImport, len(endpoints))
		for i, e := range endpoints {
			out[i] = ServiceImport{Subject: n.api(e), Response: ResponseSingleton, Threshold: c.ResponseExpiry}
		}
		return out
	}
	var info []string
	for _, s := range append(n.jingweiStreams(), n.jingweiBuckets()...) {
		info = append(info, "$JS.API.STREAM.INFO."+s)
	}
	base := []importGroup{
		{"JetStream account info (`nats account info`, nats.go). Importing it also keeps out the server's own JetStream API, which would answer every JetStream request of an account without JetStream with \"not enabled\" before the import's answer",
			single("$JS.API.INFO")},
		{"stream and bucket info of the topology: OpenTopology, js.Stream, js.KeyValue, BucketKeys (read-only metadata)", single(info...)},
	}
	switch r {
	case RoleAgent:
		return append(base,
			importGroup{"tool requests, published with JetStream: the PubAck comes back through the import", single(n.subj("requests"))},
			importGroup{"service: run a call, ask for status, read a session's log a page at a time", api("call", "status", "history")},
			importGroup{"read session events and the answers to refused requests: message gets and direct gets (batched ones answer with a stream of messages)", reads(n.events, n.answers)},
		)
	case RoleReviewer:
		return append(base,
			importGroup{"reviews, published with JetStream: the PubAck comes back through the import", single(n.subj("reviews"))},
			importGroup{"approvals and denials of calls waiting for approval, published with JetStream", single(n.subj("approvals"))},
			importGroup{"service: status, inspect, read a session's log a page at a time", api("status", "inspect", "history")},
			importGroup{"read session events, reviews, approval requests and approvals: message gets and direct gets", reads(n.events, n.reviews, n.approvals)},
		)
	case RoleHost:
		return append(base,
			importGroup{"service: prepare a retry, status, inspect, read a session's log a page at a time", api("prepare", "status", "inspect", "history")},
			importGroup{"task stops (jw.approvals.<session>.stop), published with JetStream: the session's owner records task.stopped", single(n.subj("approvals") + ".stop")},
			importGroup{"`nats micro ls/info/stats` ($SRV.PING|INFO|STATS[.name[.id]]): every instance answers", []ServiceImport{
				{Subject: "$SRV.>", Response: ResponseStream, Threshold: StreamedResponseWindow},
			}},
			importGroup{"read every jingwei stream (export, inspect, status): message gets and direct gets", reads(n.jingweiStreams()...)},
			importGroup{"read the plan records: kv.Get, kv.GetRevision", kvReads(n.plansKV)},
		)
	}
	return nil
}

// Imports returns what r's account imports from the trusted account: every
// service the role uses, and nothing else. The trusted roles (and an
// unknown role) import nothing: nil.
func (c RoleConfig) Imports(r Role) []ServiceImport {
	if r.Trusted() || !r.Valid() {
		return nil
	}
	c = c.WithDefaults()
	var out []ServiceImport
	for _, g := range c.names().importGroups(r, c) {
		for _, imp := range g.imps {
			imp.Why = g.why
			out = append(out, imp)
		}
	}
	return out
}

// Exports returns the services the trusted account exports: one entry per
// subject any untrusted role's account imports, naming the importers, and,
// with tenants, jw.api.call.*, jw.api.status.* and jw.api.history.* to every tenant's
// account.
func (c RoleConfig) Exports() []ServiceExport {
	return append(c.roleExports(), c.tenantExports()...)
}

func (c RoleConfig) roleExports() []ServiceExport {
	var out []ServiceExport
	at := map[string]int{}
	for _, r := range Roles {
		for _, imp := range c.Imports(r) {
			i, ok := at[imp.Subject]
			if !ok {
				at[imp.Subject] = len(out)
				out = append(out, ServiceExport{ServiceImport: imp})
				i = len(out) - 1
			}
			out[i].Accounts = append(out[i].Accounts, c.AccountName(r))
		}
	}
	return out
}

// Accounts returns every account of the roles: the trusted one first (with
// JetStream and the exports), then one per untrusted role (with its
// imports), in the order of Roles, then one per tenant (Tenants).
func (c RoleConfig) Accounts() []AccountSpec {
	c = c.WithDefaults()
	trusted := AccountSpec{Name: c.Account, JetStream: true, Exports: c.Exports()}
	var out []AccountSpec
	for _, r := range Roles {
		if r.Trusted() {
			trusted.Roles = append(trusted.Roles, r)
			continue
		}
		out = append(out, AccountSpec{Name: c.AccountName(r), Roles: []Role{r}, Imports: c.Imports(r)})
	}
	return append(append([]AccountSpec{trusted}, out...), c.tenantAccounts()...)
}

// importGrants are an untrusted role's publish allows: exactly the subjects
// its account imports, grouped as the imports are.
func (n names) importGrants(r Role, c RoleConfig) []Grant {
	var out []Grant
	for _, g := range n.importGroups(r, c) {
		var subjects []string
		for _, imp := range g.imps {
			subjects = append(subjects, imp.Subject)
		}
		out = append(out, pub(g.why, subjects...))
	}
	return out
}
