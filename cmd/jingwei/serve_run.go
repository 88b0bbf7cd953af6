// runServe and its steps: flags, keys, the embedded server, the parts
// (recovery worker, tool worker) and the run until one of them fails.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/metrics"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker/prober"
	"github.com/jingwei/jingwei/worker/recoverer"
)

// serveFlags are the flags of `jingwei serve`.
type serveFlags struct {
	tf          toolFlags
	lf          logFlags
	mf          metricsFlag
	listen      *string
	data        *string
	syncMode    *string
	prefix      *string
	ttl         *time.Duration
	partitions  *int
	trustFile   *string
	autoPlan    *bool
	noWorker    *bool
	noProber    *bool
	noAuth      *bool
	repair      *bool
	tenantNames multiFlag
	serverLog   *bool
}

// usageErr is an error of the command line or of the data directory
// (exit 2, with a pointer to the help), not of the running server (exit 1).
type usageErr struct{ err error }

func (e usageErr) Error() string { return e.err.Error() }

func usagef(format string, args ...any) error { return usageErr{fmt.Errorf(format, args...)} }

// serveExit prints err as runServe's answer and returns the exit status.
func serveExit(stderr io.Writer, err error) int {
	var u usageErr
	if errors.As(err, &u) {
		return usageError(stderr, "serve", "%v", u.err)
	}
	fmt.Fprintf(stderr, "jingwei serve: %v\n", err)
	return exitFailure
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, st, ok := parseServeFlags(args, stderr)
	if !ok {
		return st
	}
	log, err := f.lf.logger(stderr)
	if err != nil {
		return usageError(stderr, "serve", "%v", err)
	}
	// A taken port is said at once, before any key is made.
	if err := natsnode.CheckListen(*f.listen); err != nil {
		return serveExit(stderr, err)
	}
	ms, err := f.mf.listen()
	if err != nil {
		return serveExit(stderr, err)
	}
	defer ms.close()
	keys, err := loadServeKeys(f, stderr)
	if err != nil {
		return serveExit(stderr, err)
	}
	s, err := startServeServer(ctx, f, keys, log)
	if err != nil {
		return serveExit(stderr, err)
	}
	defer s.srv.Shutdown()
	ms.natsServer(s.srv.Server())
	parts, closeParts, err := s.parts(ctx, f, keys, ms, log)
	defer closeParts()
	if err != nil {
		return serveExit(stderr, err)
	}
	ms.serve(ctx, "serve", stderr)
	done := runParts(ctx, parts)
	printServeBanner(stdout, f, s, keys)
	if err := done(); err != nil && ctx.Err() == nil {
		return serveExit(stderr, err)
	}
	fmt.Fprintln(stderr, "jingwei serve: stopped")
	return exitOK
}

// parseServeFlags parses and checks the flags; false with the exit status
// when they are wrong.
func parseServeFlags(args []string, stderr io.Writer) (*serveFlags, int, bool) {
	fs := newFlags("serve", "All in one: embedded NATS + recovery worker + tool worker.", serveHelp, stderr)
	f := &serveFlags{}
	f.listen = fs.String("listen", natsnode.DefaultListen, "client address of the embedded server, host:port (port -1: any free port)")
	f.data = fs.String("data", "./.jingwei", "data directory: server store (DATA/data), role credentials (DATA/auth) and review-signing key (DATA/review-signer.nk)")
	f.syncMode = fs.String("sync", string(natsnode.SyncAlways), "store durability: always (fsync every write) or interval")
	f.prefix = fs.String("prefix", envOr("JINGWEI_PREFIX", "jw"), "subject prefix of the jingwei topology (env JINGWEI_PREFIX)")
	f.ttl = fs.Duration("lease-ttl", 10*time.Second, "session lease TTL (at least 1s; the same for every process)")
	f.partitions = partitionsFlag(fs)
	f.trustFile = fs.String("trust-reviewers", "", "file of further trusted reviewer public keys, one per line, each with the person's name (\"<key> <name>\")")
	f.autoPlan = fs.Bool("auto-plan", false, "issue plans for retry_allowed calls without a prepare request")
	f.noWorker = fs.Bool("no-worker", false, "run no tool worker in this process")
	f.noProber = fs.Bool("no-prober", false, "run no prober: every uncertain call of an unknown or non-idempotent tool waits for a person's review")
	f.noAuth = fs.Bool("no-auth", false, "run the server without authorization (loopback --listen only)")
	f.repair = fs.Bool("repair-topology", false, "mend jingwei streams and buckets that lack a protection, in place")
	fs.Var(&f.tenantNames, "tenant", "create an agent key for this tenant if missing (DATA/auth/tenants/NAME/agent.nk); repeatable")
	f.serverLog = fs.Bool("server-log", false, "show the embedded nats-server's own log (its banner and notices); by default only its warnings and errors")
	f.tf.register(fs)
	f.lf.register(fs)
	f.mf.register(fs)
	if st, ok := parseFlags(fs, args); !ok {
		return nil, st, false
	}
	if err := f.check(); err != nil {
		return nil, usageError(stderr, "serve", "%v", err), false
	}
	return f, exitOK, true
}

// check refuses flags that do not go together.
func (f *serveFlags) check() error {
	if msg := f.tf.check(); msg != "" {
		return errors.New(msg)
	}
	if *f.ttl < time.Second {
		return errors.New("--lease-ttl must be at least 1s")
	}
	if msg := checkPartitions(*f.partitions); msg != "" {
		return errors.New(msg)
	}
	if m := natsnode.SyncMode(*f.syncMode); m != natsnode.SyncAlways && m != natsnode.SyncInterval {
		return fmt.Errorf("--sync %q: want always or interval", *f.syncMode)
	}
	for _, tn := range f.tenantNames {
		if !access.ValidTenant(tn) {
			return fmt.Errorf("--tenant %q: want 1 to %d of [A-Za-z0-9_] (no \"-\": it ends the tenant in a session id)", tn, access.MaxTenantBytes)
		}
	}
	if *f.noAuth && len(f.tenantNames) > 0 {
		return errors.New("--tenant with --no-auth: tenants need authorization")
	}
	if *f.noAuth && !loopback(*f.listen) {
		return fmt.Errorf("--no-auth with --listen %s: a server reachable from other machines needs authorization (drop --no-auth, or listen on 127.0.0.1)", *f.listen)
	}
	return nil
}

// serveKeys are the keys in the data directory the server and its parts
// run with.
type serveKeys struct {
	kd       access.KeyDir
	trusted  recovery.TrustedKeys // reviewers
	users    map[access.Role]string
	tenants  []access.Tenant
	planner  nkeys.KeyPair
	planners recovery.TrustedKeys
	// probers are the trusted prober keys; proberKey the prober's seed
	// file (DATA/prober.nk).
	probers   recovery.TrustedKeys
	proberKey string
}

// loadServeKeys makes the data directory private and loads (creating the
// missing ones) the reviewer, approver, role, tenant and planner keys,
// saying on stderr which keys reviewers and approvers sign with.
func loadServeKeys(f *serveFlags, stderr io.Writer) (serveKeys, error) {
	var k serveKeys
	if err := privateDir(*f.data); err != nil {
		return k, usageErr{err}
	}
	trusted, err := serveReviewers(*f.data, *f.trustFile, stderr)
	if err != nil {
		return k, err
	}
	k.trusted = trusted
	if k.probers, k.proberKey, err = serveProberKey(*f.data, stderr); err != nil {
		return k, usageErr{err}
	}
	k.kd = access.KeyDir(filepath.Join(*f.data, authSubdir))
	apKey, apPub, err := serveApprovers(*f.data, string(k.kd), &f.tf)
	if err != nil {
		return k, usageErr{err}
	}
	fmt.Fprintf(stderr, "jingwei serve: approver key %s (public key %s, trusted by the tool workers); answer waiting calls with: jingwei approve --key %s\n", apKey, apPub, apKey)
	if err := k.loadRoles(*f.noAuth, f.tenantNames); err != nil {
		return k, usageErr{err}
	}
	if k.planner, err = k.kd.PlannerKeyPair(); err != nil {
		return k, usageErr{err}
	}
	keys, err := k.kd.Planners()
	if err != nil {
		return k, usageErr{err}
	}
	if k.planners, err = recovery.NewTrustedKeys(keys...); err != nil {
		return k, usageErr{err}
	}
	return k, nil
}

// serveReviewers returns the trusted reviewer keys: the data directory's
// reviewer key (created if missing) and those of trustFile, if named.
func serveReviewers(data, trustFile string, stderr io.Writer) (recovery.TrustedKeys, error) {
	keyPath := filepath.Join(data, reviewerKeyFile)
	if err := renameLegacyKey(filepath.Join(data, legacyReviewerKeyFile), keyPath); err != nil {
		return nil, usageErr{err}
	}
	pub, created, err := ensureReviewerKey(keyPath)
	if err != nil {
		return nil, usageErr{err}
	}
	trusted, err := recovery.NewTrustedKeys(pub)
	if err != nil {
		return nil, err
	}
	if trustFile != "" {
		b, err := os.ReadFile(trustFile)
		if err != nil {
			return nil, usagef("--trust-reviewers: %v", err)
		}
		more, err := recovery.ParseTrustedKeys(b)
		if err != nil {
			return nil, usagef("--trust-reviewers %s: %v", trustFile, err)
		}
		for k := range more {
			trusted[k] = struct{}{}
		}
	}
	verb := "using"
	if created {
		verb = "created"
	}
	fmt.Fprintf(stderr, "jingwei serve: %s reviewer key %s (public key %s, trusted); sign reviews with: jingwei review --key %s\n", verb, keyPath, pub, keyPath)
	return trusted, nil
}

// loadRoles creates the role keys (and the tenants' agent keys) if
// missing and reads their public keys; without authorization only the
// plan signer is made.
func (k *serveKeys) loadRoles(noAuth bool, tenantNames []string) error {
	var err error
	if noAuth {
		if _, err := os.Stat(k.kd.PlannerFile()); err != nil {
			// Without authorization the plan signer still has to exist.
			_, err = k.kd.Init()
			return err
		}
		return nil
	}
	if _, err := k.kd.Init(); err != nil {
		return err
	}
	if k.users, err = k.kd.PublicKeys(); err != nil {
		return err
	}
	for _, tn := range tenantNames {
		if _, err := k.kd.AddTenantAgent(tn, "agent"); err != nil {
			return err
		}
	}
	k.tenants, err = k.kd.Tenants()
	return err
}

// serveServer is the embedded server and how the parts connect to it.
type serveServer struct {
	srv    *natsnode.Embedded
	kd     access.KeyDir
	users  map[access.Role]string
	tcfg   stream.TopologyConfig
	repair bool
}

// startServeServer starts the embedded server with the roles' keys and
// makes (and checks) the topology as admin before anyone uses it.
func startServeServer(ctx context.Context, f *serveFlags, k serveKeys, log zerolog.Logger) (*serveServer, error) {
	srvLog := log
	if !*f.serverLog && log.GetLevel() < zerolog.WarnLevel {
		srvLog = log.Level(zerolog.WarnLevel)
	}
	srv, err := natsnode.StartEmbedded(ctx, natsnode.EmbeddedConfig{
		Dir: filepath.Join(*f.data, "data"), Listen: *f.listen, Sync: natsnode.SyncMode(*f.syncMode), Logger: srvLog,
		Auth: access.Users{Keys: k.users, Roles: access.RoleConfig{Prefix: *f.prefix, Tenants: k.tenants}},
	})
	if err != nil {
		return nil, err
	}
	s := &serveServer{
		srv: srv, kd: k.kd, users: k.users, repair: *f.repair,
		tcfg: stream.TopologyConfig{Prefix: *f.prefix, LeaseTTL: *f.ttl, Partitions: *f.partitions, Logger: log},
	}
	anc, _, _, err := s.connectAs(ctx, access.RoleAdmin)
	if err != nil {
		srv.Shutdown()
		return nil, err
	}
	anc.Close()
	return s, nil
}

// connectAs connects as a role (any client when authorization is off)
// and checks the topology through that connection.
func (s *serveServer) connectAs(ctx context.Context, r access.Role) (*nats.Conn, jetstream.JetStream, *stream.Topology, error) {
	var opts []nats.Option
	if s.users != nil {
		kp, err := s.kd.KeyPair(r)
		if err != nil {
			return nil, nil, nil, err
		}
		opts = append(opts, natsnode.NkeyOption(kp))
	}
	nc, err := s.srv.Connect(append(opts, nats.Name("jingwei serve "+string(r)))...)
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	cfg := s.tcfg
	cfg.Repair = s.repair && r == access.RoleAdmin
	topo, err := stream.EnsureTopology(ctx, js, cfg)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return nc, js, topo, nil
}

// runner is a part of serve: the recovery worker or the tool worker.
type runner interface{ Run(context.Context) error }

// parts connects the recovery worker (and, unless --no-worker, the tool
// worker) each as its own role; closeParts closes their connections.
func (s *serveServer) parts(ctx context.Context, f *serveFlags, k serveKeys, ms *metricsServer, log zerolog.Logger) (parts map[string]runner, closeParts func(), err error) {
	var conns []*nats.Conn
	closeParts = func() {
		for _, nc := range conns {
			nc.Close()
		}
	}
	observer, observed := ms.recovery()
	f.tf.observer = ms.runtime()
	rnc, _, rtopo, err := s.connectAs(ctx, access.RoleRecoverer)
	if err != nil {
		return nil, closeParts, err
	}
	conns = append(conns, rnc)
	tee := &teeObserver{next: observer}
	rec, err := recoverer.New(recoverer.Config{
		Topology: rtopo, Logger: log, TrustedReviewers: k.trusted, TrustedProbers: k.probers, AutoPlan: *f.autoPlan,
		PlannerKey: k.planner, TrustedPlanners: k.planners, Observer: tee,
	})
	if err != nil {
		return nil, closeParts, err
	}
	observed(rec)
	parts = map[string]runner{"recovery worker": rec}
	if !*f.noProber {
		pconns, pr, err := s.proberPart(ctx, f, k, ms, log)
		conns = append(conns, pconns...)
		if err != nil {
			return nil, closeParts, err
		}
		tee.p = pr
		parts["prober"] = proberRunner{pr, rec}
	}
	if *f.noWorker {
		return parts, closeParts, nil
	}
	wnc, wjs, wtopo, err := s.connectAs(ctx, access.RoleWorker)
	if err != nil {
		return nil, closeParts, err
	}
	conns = append(conns, wnc)
	tw, err := f.tf.newToolWorker(ctx, wjs, wtopo, k.planners, log)
	if err != nil {
		return nil, closeParts, err
	}
	parts["tool worker"] = tw
	ms.leases(func() metrics.Ownership { return ownership(tw) })
	return parts, closeParts, nil
}

// proberPart makes the prober, on a connection of its own role
// (DATA/auth/prober.nk): the example tools' probes settle uncertain calls
// they can read back (payments.lookup, orders.lookup), with or without the
// tool worker here. The role may read the session logs, read and fence the
// tools' data and publish reviews, and nothing else.
func (s *serveServer) proberPart(ctx context.Context, f *serveFlags, k serveKeys, ms *metricsServer, log zerolog.Logger) ([]*nats.Conn, *prober.Prober, error) {
	pnc, pjs, ptopo, err := s.connectAs(ctx, access.RoleProber)
	if err != nil {
		return nil, nil, err
	}
	pr, err := serveProber(ctx, k.proberKey, pjs, ptopo, ms.prober(), &f.tf, log)
	return []*nats.Conn{pnc}, pr, err
}

// runParts runs every part until ctx ends; if a part fails, the others
// are stopped. wait returns once all have returned, with the first
// failure.
func runParts(ctx context.Context, parts map[string]runner) (wait func() error) {
	rctx, cancel := context.WithCancel(ctx)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for name, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Run(rctx); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("%s: %w", name, err)
				}
				mu.Unlock()
				cancel()
			}
		}()
	}
	return func() error {
		wg.Wait()
		cancel()
		return first
	}
}

// printServeBanner says where the server listens and, with
// authorization, which key file each client role connects with.
func printServeBanner(stdout io.Writer, f *serveFlags, s *serveServer, k serveKeys) {
	authState := "on"
	if *f.noAuth {
		authState = "OFF (--no-auth)"
	}
	fmt.Fprintf(stdout, "jingwei serve: listening on %s (data %s, sync %s, authorization %s, tool worker %t)\n", s.srv.ClientURL(), *f.data, *f.syncMode, authState, !*f.noWorker)
	if k.users == nil {
		return
	}
	kd := k.kd
	fmt.Fprintf(stdout, "jingwei serve: clients connect with the role keys in %s (jingwei commands run here find them; elsewhere pass --auth %s or --nkey FILE):\n", kd, kd)
	for _, r := range access.Roles {
		fmt.Fprintf(stdout, "  %-14s %s\n", filepath.Base(kd.SeedFile(r)), roleUse[r])
	}
	agents, _ := kd.TenantAgents()
	for _, a := range agents {
		rel, _ := filepath.Rel(string(kd), a.Path)
		fmt.Fprintf(stdout, "  %-14s agent %s of tenant %s: jw.api.call and jw.api.status for sessions %s%s… only\n", rel, a.Agent, a.Tenant, a.Tenant, access.TenantSeparator)
	}
}
