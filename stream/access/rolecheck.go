package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// DefaultProbeSession is the session id CheckRoles's probes use. Nothing is
// ever stored under it.
const DefaultProbeSession = "jingwei-role-check"

// CheckConfig configures CheckRoles.
type CheckConfig struct {
	// URL is the server to check. Defaults to stream.DefaultURL.
	URL string
	// Dir holds the roles' credentials (KeyDir). Required.
	Dir KeyDir
	// Creds makes every role connect with <dir>/<role>.creds (operator
	// mode, IssueRoleCreds) instead of the nkey seed <dir>/<role>.nk.
	Creds bool
	// TLSCA is a PEM file of CAs to verify the server with. Empty: system
	// roots, TLS only if the URL asks for it.
	TLSCA string
	// Roles are the roles to check. Nil means every role.
	Roles []Role
	// Subjects names the topology's and the example tools' prefixes. The
	// zero value is the defaults.
	Subjects RoleConfig
	// Session is the session id the probes use; none of its subjects may
	// hold data. Defaults to DefaultProbeSession.
	Session string
	// Timeout bounds each probe (a request and its answer). Defaults to
	// 2 s.
	Timeout time.Duration
}

// WithDefaults returns c with zero fields set to their defaults.
func (c CheckConfig) WithDefaults() CheckConfig {
	if c.URL == "" {
		c.URL = natsnode.DefaultURL
	}
	if len(c.Roles) == 0 {
		c.Roles = Roles
	}
	c.Subjects = c.Subjects.WithDefaults()
	if c.Session == "" {
		c.Session = DefaultProbeSession
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	return c
}

// Outcome is what a probe expected or got.
type Outcome string

// Probe outcomes.
const (
	// Allowed: the server let the action through (it worked, or JetStream
	// or the service answered it).
	Allowed Outcome = "allowed"
	// Refused: the server refused it: a permissions violation, an
	// account that does not import it, or an account boundary that kept
	// it in (CheckResult.RefusedBy says which).
	Refused Outcome = "refused"
	// Failed: the probe could not tell (no connection, no answer and no
	// violation within the timeout).
	Failed Outcome = "error"
	// Skipped: the probe needs another role's connection that is not
	// being checked.
	Skipped Outcome = "skipped"
)

// Refusal says how the server refused an action (CheckResult.RefusedBy).
type Refusal string

// The refusals.
const (
	// RefusedPermission: the server sent a permissions violation (the
	// user's subject permissions inside its account).
	RefusedPermission Refusal = "permission"
	// RefusedNotImported: the request got "no responders" in the role's
	// own account, and a witness subscribed to the same subject in the
	// trusted account (admin's connection) received nothing: the role's
	// account does not import it.
	RefusedNotImported Refusal = "not imported"
	// RefusedIsolated: the role's traffic stayed in its own account: an
	// answer to a reply subject another account was waiting on came back
	// to the role's account, or the role saw none of another account's
	// replies.
	RefusedIsolated Refusal = "account isolation"
)

// CheckResult is one probe of one role.
type CheckResult struct {
	// Role is the role that was connected.
	Role Role `json:"role"`
	// Action says what was tried, e.g. "publish jw.events.<probe>".
	Action string `json:"action"`
	// Expect is Allowed or Refused.
	Expect Outcome `json:"expect"`
	// Got is what happened.
	Got Outcome `json:"got"`
	// RefusedBy says how the server refused it, when Got is Refused.
	RefusedBy Refusal `json:"refused_by,omitempty"`
	// Account is the role's account (RoleConfig.AccountName), or the
	// tenant's (RoleConfig.TenantAccountName).
	Account string `json:"account"`
	// Tenant is the tenant of a tenant's agent (Role is RoleAgent); ""
	// for the roles.
	Tenant string `json:"tenant,omitempty"`
	// OK is set when Got is Expect (or the probe was skipped).
	OK bool `json:"ok"`
	// Detail says what the server answered or why the probe failed.
	Detail string `json:"detail,omitempty"`
}

// CheckReport is the outcome of CheckRoles.
type CheckReport struct {
	// URL is the server checked.
	URL string `json:"url"`
	// Results holds every probe of every role, in order.
	Results []CheckResult `json:"results"`
	// OK is set when every result is OK.
	OK bool `json:"ok"`
}

// Failures returns the results that are not OK.
func (r *CheckReport) Failures() []CheckResult {
	var out []CheckResult
	for _, x := range r.Results {
		if !x.OK {
			out = append(out, x)
		}
	}
	return out
}

// CheckRoles connects to the server as each role (cfg.Dir's credentials)
// and checks that every action the role needs works and that every action
// it must not take is refused by the server, and how (CheckResult.RefusedBy):
//
//   - a permissions violation: the user's subject permissions inside its
//     account;
//   - not imported: an untrusted role's request gets "no responders" in its
//     own account, and admin's connection, subscribed to the same subject
//     in the trusted account as a witness while the request is sent again,
//     receives nothing;
//   - account isolation: a request whose reply subject another account's
//     client waits on is answered in the role's own account only, and the
//     role, subscribed to _INBOX.>, sees none of the replies of the roles
//     in other accounts.
//
// Admin's credentials serve as the witness even when admin is not in
// cfg.Roles; without them an untrusted role's "no responders" cannot be
// told apart (not imported, or imported with nothing answering it in the
// trusted account) and is reported as failed. A subscription is judged by
// the user's permissions only.
//
// The probes are harmless even where a permission is wrongly granted:
// publishes carry expected-sequence headers JetStream cannot satisfy, so
// nothing is stored; stream, message and consumer management requests carry
// a malformed body and an API level no server has, so JetStream refuses
// them; consumers the role may create are throw-away ones on the probe
// session, deleted again; service requests carry malformed bodies; replies
// are only ever sent to inboxes of the check's own connections.
//
// A role that cannot connect is reported as failed results; only a
// configuration error, or no role connecting at all, is an error.
func CheckRoles(ctx context.Context, cfg CheckConfig) (*CheckReport, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Subjects.Validate(); err != nil {
		return nil, err
	}
	if err := stream.ValidateSession(cfg.Session); err != nil {
		return nil, fmt.Errorf("stream: CheckConfig.Session: %w", err)
	}
	for _, r := range cfg.Roles {
		if !r.Valid() {
			return nil, fmt.Errorf("stream: CheckConfig.Roles: %w: %q", ErrUnknownRole, r)
		}
	}
	n := cfg.Subjects.names()
	st := &checkState{rc: cfg.Subjects, n: n, conns: map[Role]*prober{}}
	rep := &CheckReport{URL: cfg.URL, OK: true}
	var firstErr error
	for _, r := range cfg.Roles {
		p, err := connectProber(ctx, cfg, r, st)
		if err != nil {
			firstErr = cmp(firstErr, err)
			rep.Results = append(rep.Results, CheckResult{Role: r, Account: cfg.Subjects.AccountName(r), Action: "connect", Expect: Allowed, Got: Failed, Detail: err.Error()})
			continue
		}
		defer p.nc.Close()
		st.conns[r] = p
	}
	if len(st.conns) == 0 {
		return nil, firstErr
	}
	st.witness = st.conns[RoleAdmin]
	if st.witness == nil {
		if w, err := connectProber(ctx, cfg, RoleAdmin, st); err == nil {
			defer w.nc.Close()
			st.witness = w
		}
	}
	probes := catalog(n, cfg.Session)
	for _, r := range cfg.Roles {
		p := st.conns[r]
		if p == nil {
			continue
		}
		for _, pr := range probes {
			expect := pr.expect(r)
			v := pr.run(ctx, p, expect)
			res := CheckResult{
				Role: r, Account: p.account, Action: pr.action, Expect: expect, Got: v.got,
				OK: v.got == expect || v.got == Skipped, Detail: v.detail,
			}
			if v.got == Refused {
				res.RefusedBy = v.by
			}
			rep.Results = append(rep.Results, res)
		}
	}
	tr, err := checkTenants(ctx, cfg, st)
	if err != nil {
		return nil, err
	}
	rep.Results = append(rep.Results, tr...)
	for _, x := range rep.Results {
		rep.OK = rep.OK && x.OK
	}
	return rep, nil
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// checkState is what the probes of one CheckRoles share.
type checkState struct {
	rc    RoleConfig
	n     names
	conns map[Role]*prober
	// witness is admin's connection, in the trusted account; nil without
	// admin's credentials.
	witness *prober
}

// prober is one role's connection and the permission violations the
// server reported on it.
type prober struct {
	role    Role
	account string // the role's account, as RoleConfig names it
	nc      *nats.Conn
	timeout time.Duration
	st      *checkState
	// tenant is the tenant of a tenant's agent: its requests reach the
	// trusted account as <subject>.<tenant> (where the witness listens).
	tenant string

	mu         sync.Mutex
	violations map[string]string // "publish x" / "subscribe x" → error text
	changed    chan struct{}     // closed and replaced on every violation
}

var violationRe = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]+)"`)

func connectProber(ctx context.Context, cfg CheckConfig, r Role, st *checkState) (*prober, error) {
	cc := natsnode.ConnectConfig{URL: cfg.URL, TLSCA: cfg.TLSCA, Name: "jingwei auth check " + string(r), ConnectTimeout: cfg.Timeout}
	if cfg.Creds {
		cc.Creds = cfg.Dir.CredsFile(r)
		if err := checkDir(string(cfg.Dir)); err != nil {
			return nil, err
		}
		if _, err := ReadSeedFile(cc.Creds); err != nil { // checks the file's permissions
			return nil, err
		}
	} else {
		if _, err := cfg.Dir.KeyPair(r); err != nil {
			return nil, err
		}
		cc.NKeySeedFile = cfg.Dir.SeedFile(r)
	}
	nc, err := natsnode.Connect(ctx, cc)
	if err != nil {
		return nil, err
	}
	return newProber(nc, r, cfg.Subjects.AccountName(r), cfg, st), nil
}

// newProber watches nc's permission violations for the probes of r in
// account.
func newProber(nc *nats.Conn, r Role, account string, cfg CheckConfig, st *checkState) *prober {
	p := &prober{role: r, account: account, nc: nc, timeout: cfg.Timeout, st: st, violations: map[string]string{}, changed: make(chan struct{})}
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if !errors.Is(err, nats.ErrPermissionViolation) {
			return
		}
		m := violationRe.FindStringSubmatch(err.Error())
		if m == nil {
			return
		}
		op := "publish"
		if m[1] == "Subscription" {
			op = "subscribe"
		}
		p.mu.Lock()
		p.violations[op+" "+m[2]] = err.Error()
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	})
	return p
}

// forget drops an earlier violation of key, so a probe sees only its own.
func (p *prober) forget(key string) {
	p.mu.Lock()
	delete(p.violations, key)
	p.mu.Unlock()
}

// violation returns the violation reported for key, if any, and a channel
// closed on the next one.
func (p *prober) violation(key string) (string, bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.violations[key]
	return v, ok, p.changed
}

// graceAfterFlush is how long a probe that expects no answer waits, after
// a flush, for the permissions violation the server sent before its PONG
// (nats.go hands it to the error handler on another goroutine).
const graceAfterFlush = 150 * time.Millisecond

func (p *prober) flush(ctx context.Context) error {
	fctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return p.nc.FlushWithContext(fctx)
}

// awaitViolation waits, after a flush, up to graceAfterFlush for a
// violation of key.
func (p *prober) awaitViolation(ctx context.Context, key string) (Outcome, string) {
	if err := p.flush(ctx); err != nil {
		return Failed, "flush: " + err.Error()
	}
	t := time.NewTimer(graceAfterFlush)
	defer t.Stop()
	for {
		v, ok, changed := p.violation(key)
		if ok {
			return Refused, v
		}
		select {
		case <-changed:
		case <-t.C:
			return Allowed, "no permissions violation"
		case <-ctx.Done():
			return Failed, ctx.Err().Error()
		}
	}
}

// request publishes msg with a fresh reply inbox and waits for the answer
// or for a permissions violation of its subject.
func (p *prober) request(ctx context.Context, msg *nats.Msg) (Outcome, string, *nats.Msg) {
	return p.requestVia(ctx, msg, p.nc.NewInbox())
}

// requestVia is request with the reply subject inbox chosen by the caller.
func (p *prober) requestVia(ctx context.Context, msg *nats.Msg, inbox string) (Outcome, string, *nats.Msg) {
	key := "publish " + msg.Subject
	p.forget(key)
	ch := make(chan *nats.Msg, 4)
	s, err := p.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return Failed, "subscribe reply inbox: " + err.Error(), nil
	}
	defer s.Unsubscribe()
	msg.Reply = inbox
	if err := p.nc.PublishMsg(msg); err != nil {
		return Failed, "publish: " + err.Error(), nil
	}
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	for {
		v, ok, changed := p.violation(key)
		if ok {
			return Refused, v, nil
		}
		if v, ok, _ := p.violation("subscribe " + inbox); ok {
			return Failed, "reply inbox refused: " + v, nil
		}
		select {
		case m := <-ch:
			return Allowed, describe(m), m
		case <-changed:
		case <-t.C:
			return Failed, fmt.Sprintf("no answer and no permissions violation within %s", p.timeout), nil
		case <-ctx.Done():
			return Failed, ctx.Err().Error(), nil
		}
	}
}

// publish publishes msg without a reply and waits for a violation.
func (p *prober) publish(ctx context.Context, msg *nats.Msg) (Outcome, string) {
	key := "publish " + msg.Subject
	p.forget(key)
	if err := p.nc.PublishMsg(msg); err != nil {
		return Failed, "publish: " + err.Error()
	}
	return p.awaitViolation(ctx, key)
}

// subscribe subscribes to subject (no queue group, so a live service's
// queue keeps its requests), waits for a violation and unsubscribes. The
// subscription never answers anything.
func (p *prober) subscribe(ctx context.Context, subject string) (Outcome, string) {
	key := "subscribe " + subject
	p.forget(key)
	s, err := p.nc.Subscribe(subject, func(*nats.Msg) {})
	if err != nil {
		return Failed, "subscribe: " + err.Error()
	}
	defer s.Unsubscribe()
	return p.awaitViolation(ctx, key)
}

// verdict is what one probe found.
type verdict struct {
	got    Outcome
	by     Refusal
	detail string
}

// byPermission is the verdict of a probe the user's permissions decided.
func byPermission(o Outcome, detail string) verdict {
	v := verdict{got: o, detail: detail}
	if o == Refused {
		v.by = RefusedPermission
	}
	return v
}

// isNoResponders reports a "no responders" status answer.
func isNoResponders(m *nats.Msg) bool { return m != nil && m.Header.Get("Status") == "503" }

// witnessAnswer is what the witness answers a request that reached it.
const witnessAnswer = `{"jingwei_role_check":"witness"}`

// try sends a request probe. An untrusted role's "no responders" is
// checked with the witness: it means "not imported" only if nothing
// reaches the trusted account.
func (p *prober) try(ctx context.Context, build func() *nats.Msg) (verdict, *nats.Msg) {
	o, d, m := p.request(ctx, build())
	if o != Allowed || !isNoResponders(m) || p.role.Trusted() {
		return byPermission(o, d), m
	}
	return p.crossCheck(ctx, build, true)
}

// crossCheck sends build's message again (as a request with withReply)
// while the witness is subscribed to its subject in the trusted account,
// and tells whether it crossed into that account.
func (p *prober) crossCheck(ctx context.Context, build func() *nats.Msg, withReply bool) (verdict, *nats.Msg) {
	trusted := p.st.rc.AccountName(RoleAdmin)
	w := p.st.witness
	if w == nil {
		what := "no permissions violation"
		if withReply {
			what = "no responders"
		}
		return verdict{got: Failed, detail: fmt.Sprintf("%s in account %s: cannot tell whether it is not imported or imported with nothing answering in account %s without admin's credentials (the witness)", what, p.account, trusted)}, nil
	}
	msg := build()
	there := msg.Subject // where the witness listens
	for _, e := range TenantEndpoints {
		if p.tenant != "" && msg.Subject == p.st.n.api(e) {
			there += "." + p.tenant // the tenant's import
		}
	}
	crossed := verdict{got: Allowed, detail: fmt.Sprintf("crossed into account %s through an import (nothing but the check's witness answers it there)", trusted)}
	if withReply {
		seen := make(chan struct{}, 1)
		ws, err := w.nc.Subscribe(there, func(m *nats.Msg) {
			select {
			case seen <- struct{}{}:
			default:
			}
			_ = m.Respond([]byte(witnessAnswer))
		})
		if err != nil {
			return verdict{got: Failed, detail: "witness: " + err.Error()}, nil
		}
		defer ws.Unsubscribe()
		if err := w.flush(ctx); err != nil {
			return verdict{got: Failed, detail: "witness: flush: " + err.Error()}, nil
		}
		// The witness answers before the role can hear of it, so seen is
		// filled by the time the role has its answer.
		o, d, m := p.request(ctx, msg)
		select {
		case <-seen:
			return crossed, m
		default:
		}
		if o == Allowed && isNoResponders(m) {
			return verdict{got: Refused, by: RefusedNotImported, detail: fmt.Sprintf("no responders in account %s, and nothing reached account %s: not imported", p.account, trusted)}, m
		}
		return byPermission(o, d), m
	}
	ws, err := w.nc.SubscribeSync(there)
	if err != nil {
		return verdict{got: Failed, detail: "witness: " + err.Error()}, nil
	}
	defer ws.Unsubscribe()
	if err := w.flush(ctx); err != nil {
		return verdict{got: Failed, detail: "witness: flush: " + err.Error()}, nil
	}
	// publish flushes the role's connection: the server has routed the
	// message; the witness's flush then returns only after anything routed
	// to it has been read into its subscription.
	if o, d := p.publish(ctx, msg); o != Allowed {
		return byPermission(o, d), nil
	}
	if err := w.flush(ctx); err != nil {
		return verdict{got: Failed, detail: "witness: flush: " + err.Error()}, nil
	}
	if n, _, _ := ws.Pending(); n > 0 {
		return crossed, nil
	}
	return verdict{got: Refused, by: RefusedNotImported, detail: fmt.Sprintf("no permissions violation, but nothing reached account %s: not imported", trusted)}, nil
}

// describe summarizes an answer: a status header, a JetStream or service
// error, or "answered".
func describe(m *nats.Msg) string {
	if st := m.Header.Get("Status"); st != "" {
		d := m.Header.Get("Description")
		if st == "503" {
			d = "no responders"
		}
		return strings.TrimSpace("answered: status " + st + " " + d)
	}
	if e := m.Header.Get("Nats-Service-Error"); e != "" {
		return "service answered: " + e
	}
	var body struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if json.Unmarshal(m.Data, &body) == nil && body.Error != nil {
		return fmt.Sprintf("answered: JetStream error %d: %s", body.Error.ErrCode, body.Error.Description)
	}
	return "answered"
}

// apiError returns the JetStream error code of an answer (0 if none).
func apiError(m *nats.Msg) int {
	var body struct {
		Error *struct {
			ErrCode int `json:"err_code"`
		} `json:"error"`
	}
	if m != nil && json.Unmarshal(m.Data, &body) == nil && body.Error != nil {
		return body.Error.ErrCode
	}
	return 0
}

// runFn runs one probe as p.
type runFn func(ctx context.Context, p *prober, expect Outcome) verdict

// probe is one action tried with every role: allowed lists the roles that
// need it; admin may always, unless refusedForAdmin (the isolation
// probes, which no role may pass).
type probe struct {
	action          string
	allowed         []Role
	refusedForAdmin bool
	run             runFn
}

// expect is what the probe should find for r.
func (pr probe) expect(r Role) Outcome {
	if slices.Contains(pr.allowed, r) || r == RoleAdmin && !pr.refusedForAdmin {
		return Allowed
	}
	return Refused
}
