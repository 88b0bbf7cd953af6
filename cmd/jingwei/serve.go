package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/recoverer"
)

func init() {
	register(command{name: "serve", summary: "all in one: embedded NATS with JetStream, the recovery worker and a tool worker", run: runServe})
}

const serveHelp = `  jingwei serve [--listen 127.0.0.1:4222] [--data ./.jingwei] [--sync always|interval]
                [--trust-reviewers FILE] [--auto-plan] [--no-worker] [--lease-ttl 10s]

The zero-set-up mode: one process runs an embedded NATS server with JetStream
(store in DATA/data), the recovery worker with the 'jingwei' micro service
(jw.api.call, inspect, prepare, status) and a tool worker with the example
tools. Agents publish requests on jw.requests.<session> or call jw.api.call;
other 'jingwei worker' processes may join with --server.

On first start serve creates a reviewer key in DATA/reviewer.nk (an nkey user
seed, permissions 0600) and trusts it; it prints the file and the public key.
Sign reviews with: jingwei review --key DATA/reviewer.nk …
--trust-reviewers FILE trusts more keys (one public key per line).

--sync always (the default) fsyncs every write before acknowledging it, which
recovery's start-marker rule relies on across machine crashes; interval is
much faster but a power loss can lose acknowledged events.

--no-worker runs the server and the recovery worker only (tool workers join
with 'jingwei worker --server …').

SIGTERM or SIGINT shuts down cleanly: the tool worker drains, the recovery
worker stops, the server flushes its store.

Exit status: 0 after a clean shutdown; 1 the server or a worker could not
start (address in use, store unusable); 2 usage.`

// reviewerKeyFile is the reviewer seed serve creates in its data directory.
const reviewerKeyFile = "reviewer.nk"

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve", "All in one: embedded NATS + recovery worker + tool worker.", serveHelp, stderr)
	var (
		tf toolFlags
		lf logFlags
	)
	listen := fs.String("listen", stream.DefaultListen, "client address of the embedded server, host:port (port -1: any free port)")
	data := fs.String("data", "./.jingwei", "data directory: server store (DATA/data) and reviewer key (DATA/reviewer.nk)")
	syncMode := fs.String("sync", string(stream.SyncAlways), "store durability: always (fsync every write) or interval")
	prefix := fs.String("prefix", envOr("JINGWEI_PREFIX", "jw"), "subject prefix of the jingwei topology (env JINGWEI_PREFIX)")
	ttl := fs.Duration("lease-ttl", 10*time.Second, "session lease TTL (at least 1s; the same for every process)")
	trustFile := fs.String("trust-reviewers", "", "file of further trusted reviewer public keys, one per line")
	autoPlan := fs.Bool("auto-plan", false, "issue plans for retry_allowed calls without a prepare request")
	noWorker := fs.Bool("no-worker", false, "run no tool worker in this process")
	tf.register(fs)
	lf.register(fs)
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if msg := tf.check(); msg != "" {
		return usageError(stderr, "serve", "%s", msg)
	}
	if *ttl < time.Second {
		return usageError(stderr, "serve", "--lease-ttl must be at least 1s")
	}
	if m := stream.SyncMode(*syncMode); m != stream.SyncAlways && m != stream.SyncInterval {
		return usageError(stderr, "serve", "--sync %q: want always or interval", *syncMode)
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return usageError(stderr, "serve", "%v", err)
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "jingwei serve: %v\n", err)
		return exitFailure
	}

	// The reviewer key: created once, trusted always.
	if err := os.MkdirAll(*data, 0o700); err != nil {
		return fail(err)
	}
	keyPath := filepath.Join(*data, reviewerKeyFile)
	pub, created, err := ensureReviewerKey(keyPath)
	if err != nil {
		return fail(err)
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

	srv, err := stream.StartEmbedded(ctx, stream.EmbeddedConfig{
		Dir: filepath.Join(*data, "data"), Listen: *listen, Sync: stream.SyncMode(*syncMode), Logger: log,
	})
	if err != nil {
		return fail(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	topo, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{Prefix: *prefix, LeaseTTL: *ttl, Logger: log})
	if err != nil {
		return fail(err)
	}
	rec, err := recoverer.New(recoverer.Config{Topology: topo, Logger: log, TrustedReviewers: trusted, AutoPlan: *autoPlan})
	if err != nil {
		return fail(err)
	}
	type runner interface{ Run(context.Context) error }
	parts := map[string]runner{"recovery worker": rec}
	if !*noWorker {
		tw, err := tf.newToolWorker(ctx, js, topo, log)
		if err != nil {
			return fail(err)
		}
		parts["tool worker"] = tw
	}

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
	fmt.Fprintf(stdout, "jingwei serve: listening on %s (data %s, sync %s, tool worker %t)\n", srv.ClientURL(), *data, *syncMode, !*noWorker)
	wg.Wait()
	if first != nil && ctx.Err() == nil {
		return fail(first)
	}
	fmt.Fprintln(stderr, "jingwei serve: stopped")
	return exitOK
}

// ensureReviewerKey returns the public key of the reviewer seed at path,
// creating the seed (0600) if the file does not exist.
func ensureReviewerKey(path string) (pub string, created bool, err error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
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
	kp, err := loadUserKey(path)
	if err != nil {
		return "", false, err
	}
	pub, err = kp.PublicKey()
	return pub, created, err
}
