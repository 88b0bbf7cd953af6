package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/metrics"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/catalog"
	"github.com/jingwei/jingwei/worker/prober"
	"github.com/jingwei/jingwei/worker/recoverer"
)

// proberKeyFile is the prober's signing seed serve creates in its data
// directory: its automated reviews are signed with it, and the recovery
// worker trusts it as a prober's key (never as a person's).
const proberKeyFile = "prober.nk"

// serveProberKey returns serve's prober key set (trusted probers) and the
// key pair, creating DATA/prober.nk on first start.
func serveProberKey(data string, stderr io.Writer) (recovery.TrustedKeys, string, error) {
	path := filepath.Join(data, proberKeyFile)
	pub, created, err := ensureReviewerKey(path)
	if err != nil {
		return nil, "", err
	}
	verb := "using"
	if created {
		verb = "created"
	}
	fmt.Fprintf(stderr, "jingwei serve: %s prober key %s (public key %s, trusted as a prober: its reviews say they are a probe's)\n", verb, path, pub)
	t, err := recovery.NewTrustedKeys(pub)
	return t, path, err
}

// serveProber is the prober serve runs next to its recovery worker: it
// hears of uncertain calls from the recovery worker in-process (the
// recoverer's Observer), and on one connection of the prober role (js,
// topo) reads the session logs, runs the example tools' probes (which read
// and fence the tools' data) and publishes its signed reviews.
//
// With a tool catalog (serve --tools), the catalog's tools and the probes
// they name (MCP or HTTP tools declared read_only) are probed too.
func serveProber(ctx context.Context, keyPath string, js jetstream.JetStream, topo *stream.Topology, observe func(prober.Outcome), tf *toolFlags, log zerolog.Logger) (*prober.Prober, error) {
	kp, err := access.ReadSeedFile(keyPath)
	if err != nil {
		return nil, err
	}
	tl, err := tools.New(ctx, tools.Config{JS: js, Replicas: topo.Config().Replicas, Logger: log})
	if err != nil {
		return nil, err
	}
	list := append(tl.List(), tl.Probes()...)
	if tf != nil && tf.catalog != nil {
		if tf.tools == nil {
			tf.tools = catalog.Open(tf.catalog, log)
		}
		cl, err := tf.tools.Tools(ctx, list)
		if err != nil {
			return nil, err
		}
		// The catalog's tools, and the example probes its built-in
		// entries name.
		have := map[string]bool{}
		for _, t := range cl {
			have[t.Metadata.Name] = true
		}
		for _, p := range tl.Probes() {
			if !have[p.Metadata.Name] {
				cl = append(cl, p)
			}
		}
		list = cl
	}
	reg, err := worker.NewRegistry(list...)
	if err != nil {
		return nil, err
	}
	return prober.New(prober.Config{Topology: topo, Key: kp, Tools: reg, Observe: observe, Logger: log.With().Str("part", "prober").Logger()})
}

// recoverProbers reads recover's trusted prober keys: the --trust-probers
// file, plus the public key of --probe-key's seed when the prober runs in
// the process.
func recoverProbers(file, seed string) (recovery.TrustedKeys, error) {
	t := recovery.TrustedKeys{}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--trust-probers: %w", err)
		}
		if t, err = recovery.ParseTrustedKeys(b); err != nil {
			return nil, fmt.Errorf("--trust-probers %s: %w", file, err)
		}
	}
	if seed != "" {
		kp, err := access.ReadSeedFile(seed)
		if err != nil {
			return nil, fmt.Errorf("--probe-key: %w", err)
		}
		pub, err := kp.PublicKey()
		if err != nil || !nkeys.IsValidPublicUserKey(pub) {
			return nil, fmt.Errorf("--probe-key %s is not an nkey user seed", seed)
		}
		t[pub] = struct{}{}
	}
	return t, nil
}

// proberConn returns how recover's prober connects: --prober-creds or
// --prober-nkey, else the prober role's seed in the auth directory
// (<auth dir>/prober.nk, checked: it must exist and be private), else
// recover's own --creds or --nkey (a server with one user for everything,
// or none).
func (n *natsFlags) proberConn(creds, nkey string) (consoleConn, error) {
	cc := consoleConn{role: access.RoleProber, creds: creds, nkey: nkey}
	if cc.creds != "" || cc.nkey != "" {
		return cc, nil
	}
	dir := n.authDir()
	if dir == "" {
		return cc, nil
	}
	if _, err := access.KeyDir(dir).KeyPair(access.RoleProber); err != nil {
		return cc, fmt.Errorf("role %s: %w (an auth directory from before the prober role: 'jingwei auth init --dir %s' adds the missing key; an external server also needs its user: 'jingwei auth config')", access.RoleProber, err, dir)
	}
	cc.nkey = access.KeyDir(dir).SeedFile(access.RoleProber)
	return cc, nil
}

// startProber runs recover's in-process prober (--probe-key): fed by the
// recovery worker's assessments (tee), reading, fencing and publishing its
// reviews on one connection of the prober role (cc). stop ends it and
// closes the connection.
func (n *natsFlags) startProber(ctx context.Context, seed string, cc consoleConn, rec *recoverer.Recoverer, tee *teeObserver, observe func(prober.Outcome), log zerolog.Logger) (stop func(), err error) {
	pnc, err := n.connectConsole(ctx, cc, log)
	if err != nil {
		return nil, fmt.Errorf("prober: %w", err)
	}
	closeAll := func() { pnc.Close() }
	pjs, err := jetstream.New(pnc)
	if err != nil {
		closeAll()
		return nil, err
	}
	ptopo, err := stream.OpenTopology(ctx, pjs, stream.TopologyConfig{Prefix: n.prefix})
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("prober: %w", err)
	}
	pr, err := serveProber(ctx, seed, pjs, ptopo, observe, nil, log)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("prober: %w", err)
	}
	tee.p = pr
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = proberRunner{pr, rec}.Run(pctx) }()
	log.Info().Str("prober_key", pr.PublicKey()).Msg("prober started: the example tools' probes settle the uncertain calls they can read back")
	return func() { cancel(); <-done; closeAll() }, nil
}

// proberRunner runs a prober's queue as one of serve's parts, and queues
// the calls awaiting review once the recovery worker is ready.
type proberRunner struct {
	p   *prober.Prober
	rec *recoverer.Recoverer
}

func (r proberRunner) Run(ctx context.Context) error {
	go queueAwaiting(ctx, r.rec, r.p)
	return r.p.RunQueue(ctx)
}

// queueAwaiting hands the prober the calls that already await review when
// the recovery worker is ready: those it rebuilt from the streams after a
// restart were assessed before this process, and no assessment of theirs
// will come again.
func queueAwaiting(ctx context.Context, rec *recoverer.Recoverer, p *prober.Prober) {
	select {
	case <-rec.Ready():
	case <-ctx.Done():
		return
	}
	st, err := rec.Status(ctx, "")
	if err != nil {
		return
	}
	for _, a := range st.AwaitingReview {
		p.Assessed(a)
	}
}

// teeObserver tells the metrics observer (when there is one) and the
// prober (once set, before anything runs) of every assessment.
type teeObserver struct {
	next recoverer.Observer
	p    *prober.Prober
}

func (o *teeObserver) Assessed(a schema.Assessment) {
	if o.next != nil {
		o.next.Assessed(a)
	}
	if o.p != nil {
		o.p.Assessed(a)
	}
}

// Counts is recoverer.Counter's: the tee counts when the metrics behind
// it do (the prober counts nothing).
func (o *teeObserver) Counts() bool { return o.next != nil }

// PlanAnswered, ReviewJudged and ApprovalTimedOut pass the recovery
// worker's answers on to the metrics (recoverer.OutcomeObserver).
func (o *teeObserver) PlanAnswered(code schema.Code) {
	if oo, ok := o.next.(recoverer.OutcomeObserver); ok {
		oo.PlanAnswered(code)
	}
}

func (o *teeObserver) ReviewJudged(verdict schema.Verdict, code schema.Code) {
	if oo, ok := o.next.(recoverer.OutcomeObserver); ok {
		oo.ReviewJudged(verdict, code)
	}
}

func (o *teeObserver) ApprovalTimedOut(session, callID string) {
	if oo, ok := o.next.(recoverer.OutcomeObserver); ok {
		oo.ApprovalTimedOut(session, callID)
	}
}

// Reviewed passes a judged review on to the metrics.
func (o *teeObserver) Reviewed(rv schema.Review, accepted bool) {
	if ro, ok := o.next.(recoverer.ReviewObserver); ok {
		ro.Reviewed(rv, accepted)
	}
}

// TookOver passes the takeover on; its assessments reach the prober
// through Assessed when the classifier publishes them.
func (o *teeObserver) TookOver(session string, h []schema.Event, assessed []schema.Assessment) {
	if o.next != nil {
		o.next.TookOver(session, h, assessed)
	}
}

// prober returns a prober's metrics' Observe (nil without --metrics).
func (s *metricsServer) prober() func(prober.Outcome) {
	if s == nil {
		return nil
	}
	return metrics.NewProber(s.reg).Observe
}
