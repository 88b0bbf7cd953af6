package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"net"
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
	"github.com/jingwei/jingwei/worker/recoverer"
)

func init() {
	register(command{name: "serve", summary: "all in one: embedded NATS with JetStream, the recovery worker and a tool worker", run: runServe})
}

const serveHelp = `  jingwei serve [--listen 127.0.0.1:4222] [--data ./.jingwei] [--sync always|interval]
                [--trust-reviewers FILE] [--auto-plan] [--no-worker] [--lease-ttl 10s]
                [--partitions 32] [--no-auth] [--repair-topology]
                [--tenant NAME]...

The zero-set-up mode: one process runs an embedded NATS server with JetStream
(store in DATA/data), the recovery worker with the 'jingwei' micro service
(jw.api.inspect, prepare, status, history) and a tool worker with the example tools,
which serves jw.api.call (micro service 'jingwei-gateway'; with --no-worker,
start 'jingwei worker' for it). Agents publish requests on
jw.requests.<session> or call jw.api.call; other 'jingwei worker' processes
may join with --server.

Authorization is on: on first start serve creates one nkey credential per
role in DATA/auth (agent, reviewer, host, worker, recoverer, admin; files
0600, directory 0700), the recovery worker's plan-signing key
(DATA/auth/planner.nk) and the list of plan signers tool workers trust
(DATA/auth/planners), runs the server with each role's permissions, and
connects its own recovery worker, tool worker and topology set-up with their
roles. It prints which file each kind of client uses; jingwei commands run in
the same directory find DATA/auth by themselves (or take --auth DIR).
A data directory or key file that others can read or write is refused, with
the chmod that fixes it.

Agents that must not see each other's sessions get tenant credentials:
--tenant NAME (repeatable) creates DATA/auth/tenants/NAME/agent.nk if it is
missing (jingwei auth tenant --dir DATA/auth --tenant NAME --agent A adds
more agents). Every tenant in DATA/auth/tenants is loaded at start: its
agents may call jw.api.call and jw.api.status for sessions NAME-… only, and
read nothing else (docs/protocol.md §4). The fleet-wide agent key
(DATA/auth/agent.nk) sees every session.

It also creates a reviewer key in DATA/reviewer.nk and trusts it; sign
reviews with: jingwei review --key DATA/reviewer.nk …
--trust-reviewers FILE trusts more keys (lines "<public key> <name>").

--no-auth runs the server open to every client (only on a loopback
--listen address; a non-loopback one is refused without authorization).

--sync always (the default) fsyncs every write before acknowledging it, which
recovery's start-marker rule relies on across machine crashes; interval is
much faster but a power loss can lose acknowledged events.

A jingwei stream or bucket that lacks a protection jingwei relies on (it
allows deleting or purging messages, has a shorter dedup window, no direct
gets) is refused at start, naming the setting; --repair-topology mends it in
place (nothing stored is changed).

--no-worker runs the server and the recovery worker only (tool workers join
with 'jingwei worker --server …').

--lease-ttl and --partitions (default 32: the request and plan streams are
divided into that many partitions of sessions) are stored with the topology
when it is made; a restart or a joining 'jingwei worker' or 'jingwei
recover' with other values is refused, naming the setting and both values.

SIGTERM or SIGINT shuts down cleanly: the tool worker drains, the recovery
worker stops, the server flushes its store.

Exit status: 0 after a clean shutdown; 1 the server or a worker could not
start (address in use, store unusable, a weakened stream); 2 usage (a bad
flag, an insecure data directory or key file).`

// reviewerKeyFile is the reviewer seed serve creates in its data directory.
const reviewerKeyFile = "reviewer.nk"

// authSubdir is where serve keeps the role credentials (DATA/auth).
const authSubdir = "auth"

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve", "All in one: embedded NATS + recovery worker + tool worker.", serveHelp, stderr)
	var (
		tf toolFlags
		lf logFlags
	)
	listen := fs.String("listen", natsnode.DefaultListen, "client address of the embedded server, host:port (port -1: any free port)")
	data := fs.String("data", "./.jingwei", "data directory: server store (DATA/data), role credentials (DATA/auth) and reviewer key (DATA/reviewer.nk)")
	syncMode := fs.String("sync", string(natsnode.SyncAlways), "store durability: always (fsync every write) or interval")
	prefix := fs.String("prefix", envOr("JINGWEI_PREFIX", "jw"), "subject prefix of the jingwei topology (env JINGWEI_PREFIX)")
	ttl := fs.Duration("lease-ttl", 10*time.Second, "session lease TTL (at least 1s; the same for every process)")
	partitions := partitionsFlag(fs)
	trustFile := fs.String("trust-reviewers", "", "file of further trusted reviewer public keys, one per line, each with the person's name (\"<key> <name>\")")
	autoPlan := fs.Bool("auto-plan", false, "issue plans for retry_allowed calls without a prepare request")
	noWorker := fs.Bool("no-worker", false, "run no tool worker in this process")
	noAuth := fs.Bool("no-auth", false, "run the server without authorization (loopback --listen only)")
	repair := fs.Bool("repair-topology", false, "mend jingwei streams and buckets that lack a protection, in place")
	var tenantNames multiFlag
	fs.Var(&tenantNames, "tenant", "create an agent key for this tenant if missing (DATA/auth/tenants/NAME/agent.nk); repeatable")
	serverLog := fs.Bool("server-log", false, "show the embedded nats-server's own log (its banner and notices); by default only its warnings and errors")
	tf.register(fs)
	lf.register(fs)
	var mf metricsFlag
	mf.register(fs)
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if msg := tf.check(); msg != "" {
		return usageError(stderr, "serve", "%s", msg)
	}
	if *ttl < time.Second {
		return usageError(stderr, "serve", "--lease-ttl must be at least 1s")
	}
	if msg := checkPartitions(*partitions); msg != "" {
		return usageError(stderr, "serve", "%s", msg)
	}
	if m := natsnode.SyncMode(*syncMode); m != natsnode.SyncAlways && m != natsnode.SyncInterval {
		return usageError(stderr, "serve", "--sync %q: want always or interval", *syncMode)
	}
	for _, tn := range tenantNames {
		if !access.ValidTenant(tn) {
			return usageError(stderr, "serve", "--tenant %q: want 1 to %d of [A-Za-z0-9_] (no \"-\": it ends the tenant in a session id)", tn, access.MaxTenantBytes)
		}
	}
	if *noAuth && len(tenantNames) > 0 {
		return usageError(stderr, "serve", "--tenant with --no-auth: tenants need authorization")
	}
	if *noAuth && !loopback(*listen) {
		return usageError(stderr, "serve", "--no-auth with --listen %s: a server reachable from other machines needs authorization (drop --no-auth, or listen on 127.0.0.1)", *listen)
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return usageError(stderr, "serve", "%v", err)
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "jingwei serve: %v\n", err)
		return exitFailure
	}

	// A taken port is said at once, before any key is made.
	if err := natsnode.CheckListen(*listen); err != nil {
		return fail(err)
	}
	ms, err := mf.listen()
	if err != nil {
		return fail(err)
	}
	defer ms.close()
	observer, observed := ms.recovery()
	tf.observer = ms.runtime()
	// The data directory and the keys in it: private, created once.
	if err := privateDir(*data); err != nil {
		return usageError(stderr, "serve", "%v", err)
	}
	keyPath := filepath.Join(*data, reviewerKeyFile)
	pub, created, err := ensureReviewerKey(keyPath)
	if err != nil {
		return usageError(stderr, "serve", "%v", err)
	}
	trusted, err := recovery.NewTrustedKeys(pub)
	if err != nil {
		return fail(err)
	}
	if *trustFile != "" {
		b, err := os.ReadFile(*trustFile)
		if err != nil {
			return usageError(stderr, "serve", "--trust-reviewers: %v", err)
		}
		more, err := recovery.ParseTrustedKeys(b)
		if err != nil {
			return usageError(stderr, "serve", "--trust-reviewers %s: %v", *trustFile, err)
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

	kd := access.KeyDir(filepath.Join(*data, authSubdir))
	apKey, apPub, err := serveApprovers(*data, string(kd), &tf)
	if err != nil {
		return usageError(stderr, "serve", "%v", err)
	}
	fmt.Fprintf(stderr, "jingwei serve: approver key %s (public key %s, trusted by the tool workers); answer waiting calls with: jingwei approve --key %s\n", apKey, apPub, apKey)
	var (
		users    map[access.Role]string
		tenants  []access.Tenant
		planner  nkeys.KeyPair
		planners recovery.TrustedKeys
	)
	if !*noAuth {
		if _, err := kd.Init(); err != nil {
			return usageError(stderr, "serve", "%v", err)
		}
		if users, err = kd.PublicKeys(); err != nil {
			return usageError(stderr, "serve", "%v", err)
		}
		for _, tn := range tenantNames {
			if _, err := kd.AddTenantAgent(tn, "agent"); err != nil {
				return usageError(stderr, "serve", "%v", err)
			}
		}
		if tenants, err = kd.Tenants(); err != nil {
			return usageError(stderr, "serve", "%v", err)
		}
	} else if _, err := os.Stat(kd.PlannerFile()); err != nil {
		// Without authorization the plan signer still has to exist.
		if _, err := kd.Init(); err != nil {
			return usageError(stderr, "serve", "%v", err)
		}
	}
	if planner, err = kd.PlannerKeyPair(); err != nil {
		return usageError(stderr, "serve", "%v", err)
	}
	keys, err := kd.Planners()
	if err != nil {
		return usageError(stderr, "serve", "%v", err)
	}
	if planners, err = recovery.NewTrustedKeys(keys...); err != nil {
		return usageError(stderr, "serve", "%v", err)
	}

	srvLog := log
	if !*serverLog && log.GetLevel() < zerolog.WarnLevel {
		srvLog = log.Level(zerolog.WarnLevel)
	}
	srv, err := natsnode.StartEmbedded(ctx, natsnode.EmbeddedConfig{
		Dir: filepath.Join(*data, "data"), Listen: *listen, Sync: natsnode.SyncMode(*syncMode), Logger: srvLog,
		Auth: access.Users{Keys: users, Roles: access.RoleConfig{Prefix: *prefix, Tenants: tenants}},
	})
	if err != nil {
		return fail(err)
	}
	defer srv.Shutdown()
	tcfg := stream.TopologyConfig{Prefix: *prefix, LeaseTTL: *ttl, Partitions: *partitions, Logger: log}
	// connectAs connects as a role (any client when authorization is off)
	// and checks the topology through that connection.
	connectAs := func(r access.Role) (*nats.Conn, jetstream.JetStream, *stream.Topology, error) {
		var opts []nats.Option
		if users != nil {
			kp, err := kd.KeyPair(r)
			if err != nil {
				return nil, nil, nil, err
			}
			opts = append(opts, natsnode.NkeyOption(kp))
		}
		nc, err := srv.Connect(append(opts, nats.Name("jingwei serve "+string(r)))...)
		if err != nil {
			return nil, nil, nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, nil, err
		}
		cfg := tcfg
		cfg.Repair = *repair && r == access.RoleAdmin
		topo, err := stream.EnsureTopology(ctx, js, cfg)
		if err != nil {
			nc.Close()
			return nil, nil, nil, err
		}
		return nc, js, topo, nil
	}
	// The topology is made (and checked) by admin before anyone uses it.
	anc, _, _, err := connectAs(access.RoleAdmin)
	if err != nil {
		return fail(err)
	}
	anc.Close()
	rnc, _, rtopo, err := connectAs(access.RoleRecoverer)
	if err != nil {
		return fail(err)
	}
	defer rnc.Close()
	rec, err := recoverer.New(recoverer.Config{
		Topology: rtopo, Logger: log, TrustedReviewers: trusted, AutoPlan: *autoPlan,
		PlannerKey: planner, TrustedPlanners: planners, Observer: observer,
	})
	if err != nil {
		return fail(err)
	}
	observed(rec)
	type runner interface{ Run(context.Context) error }
	parts := map[string]runner{"recovery worker": rec}
	if !*noWorker {
		wnc, wjs, wtopo, err := connectAs(access.RoleWorker)
		if err != nil {
			return fail(err)
		}
		defer wnc.Close()
		tw, err := tf.newToolWorker(ctx, wjs, wtopo, planners, log)
		if err != nil {
			return fail(err)
		}
		parts["tool worker"] = tw
		ms.leases(func() metrics.Ownership { return ownership(tw) })
	}
	ms.serve(ctx, "serve", stderr)

	// Run everything until ctx ends; if a part fails, stop the others.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
	authState := "on"
	if *noAuth {
		authState = "OFF (--no-auth)"
	}
	fmt.Fprintf(stdout, "jingwei serve: listening on %s (data %s, sync %s, authorization %s, tool worker %t)\n", srv.ClientURL(), *data, *syncMode, authState, !*noWorker)
	if users != nil {
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
	wg.Wait()
	if first != nil && ctx.Err() == nil {
		return fail(first)
	}
	fmt.Fprintln(stderr, "jingwei serve: stopped")
	return exitOK
}

// privateDir creates dir (0700) if it does not exist and refuses one that
// other users can read or write: it holds the server store and keys.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: data directory %s has mode %04o: others can read or write it; fix it with: chmod 700 %s", access.ErrInsecureFile, dir, st.Mode().Perm(), dir)
	}
	return nil
}

// loopback reports whether a host:port listens on a loopback address only.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ensureReviewerKey returns the public key of the reviewer seed at path,
// creating the seed (0600) if the file does not exist. An existing file
// others can read or write is refused (stream.ErrInsecureFile).
func ensureReviewerKey(path string) (pub string, created bool, err error) {
	if _, err := os.Stat(path); errors.Is(err, iofs.ErrNotExist) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", false, err
		}
		seed, _ := kp.Seed()
		if err := writeSecretFile(path, append(seed, '\n')); err != nil {
			return "", false, err
		}
		created = true
	}
	kp, err := access.ReadSeedFile(path)
	if err != nil {
		return "", false, err
	}
	pub, err = kp.PublicKey()
	if err == nil && !nkeys.IsValidPublicUserKey(pub) {
		err = fmt.Errorf("%s is not an nkey user seed", path)
	}
	return pub, created, err
}
