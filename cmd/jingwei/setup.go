package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/setupreport"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
)

func init() {
	register(command{name: "setup", summary: "create (or check and repair) jingwei's streams and buckets, as admin", run: runSetup})
	commandRole["setup"] = access.RoleAdmin
}

const setupHelp = `  jingwei setup [--server URL] [--auth DIR | --nkey FILE | --creds FILE]
                [--replicas 1] [--lease-ttl 10s] [--partitions 32] [--repair] [--json] [--wait 2m]
                [--confirm-replaced STREAM[,STREAM…]]

Creates jingwei's streams and buckets on a server where they do not exist
yet, and checks those that do: the set-up an external deployment runs once
with the admin role's credentials before its workers start ('jingwei serve'
does it by itself). With authorization on, only admin may create, update or
delete a stream; tool workers and recovery workers only look the topology
up: they wait for a missing one and refuse to start on a weakened one.

A server that is not reachable yet, JetStream not ready or without a meta
leader (a cluster starting, a node down) is waited for with backoff, each
try logged, for up to --wait (default 2m; 0 tries once).

A stream or bucket that lacks a protection jingwei relies on (it allows
deleting or purging messages, has a shorter dedup window, no direct gets)
is refused, naming the setting and the command that repairs it; --repair
mends it in place (nothing stored is changed). --replicas, --lease-ttl and
--partitions must be what the workers of the deployment use (a topology
made with other values is refused, naming the setting and both values).

Setup records the identity of each protected stream (JW_EVENTS,
JW_REVIEWS, JW_PLANS, JW_ASSESSMENTS, JW_APPROVALS and the plans and
budget buckets: when the server created it, the first sequence it holds)
in the metadata of JW_IDENTITY, once. A protected stream deleted and
created again, or one that lost messages from its start, no longer
matches: recovery workers refuse to prepare plans and take sessions over
(stream_replaced), and setup names it and exits 1. Once you have checked
what the stream holds (a review or plan lost with the old one is lost for
good: look for completed reviews in your own records before you confirm),
--confirm-replaced STREAM records its identity as it is now, and recovery
resumes (restart the recovery workers to take over what expired meanwhile).

Output: each stream (name, subjects, replicas) and bucket, then the line
saying the topology is in place; --json prints one object instead:
{"prefix":…,"server":…,"streams":[{"name","subjects","replicas"}],"buckets":[…],
"confirmed":[{"stream","created","first_seq"}],"replaced":[{"stream","reason"}]}.

Exit status: 0 the topology is in place; 1 the server stayed unreachable
for --wait, the connection may not create streams, an existing stream
conflicts, or a protected stream was replaced and not confirmed; 2 usage.`

func runSetup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("setup", "Create or check jingwei's streams and buckets (admin).", setupHelp, stderr)
	var (
		nf natsFlags
		lf logFlags
	)
	nf.register(fs)
	lf.register(fs)
	replicas := fs.Int("replicas", 1, "replicas of every stream and bucket: 1 on a single server, 3 in a cluster")
	ttl := fs.Duration("lease-ttl", 10*time.Second, "session lease TTL of the deployment (at least 1s)")
	partitions := partitionsFlag(fs)
	repair := fs.Bool("repair", false, "mend streams and buckets that lack a protection, in place")
	asJSON := fs.Bool("json", false, "print the topology as one JSON object")
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait, with backoff, for the server and JetStream (a cluster starting, no meta leader yet, a node down); 0 tries once")
	var confirm multiFlag
	fs.Var(&confirm, "confirm-replaced", "record the identity of a protected stream that was replaced (deleted and created again, or lost messages) as it is now; repeat or separate with commas")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if *replicas < 1 {
		return usageError(stderr, "setup", "--replicas must be at least 1")
	}
	if *ttl < time.Second {
		return usageError(stderr, "setup", "--lease-ttl must be at least 1s")
	}
	if msg := checkPartitions(*partitions); msg != "" {
		return usageError(stderr, "setup", "%s", msg)
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return usageError(stderr, "setup", "%v", err)
	}
	var nc *nats.Conn
	var topo *stream.Topology
	err = waitFor(ctx, log, "jingwei setup", *wait, func(ctx context.Context) error {
		c, err := nf.connect(ctx, "setup", log)
		if err != nil {
			return err
		}
		js, err := jetstream.New(c)
		if err == nil {
			topo, err = stream.EnsureTopology(ctx, js, stream.TopologyConfig{Prefix: nf.prefix, Replicas: *replicas, LeaseTTL: *ttl, Partitions: *partitions, Repair: *repair, Logger: log})
		}
		if err != nil {
			if errors.Is(c.LastError(), nats.ErrPermissionViolation) {
				// Not allowed to create streams: waiting will not help.
				err = permanentError{err}
			}
			c.Close()
			return err
		}
		nc = c
		return nil
	})
	if err != nil {
		fmt.Fprintf(stderr, "jingwei setup: %v\n", err)
		return exitFailure
	}
	defer nc.Close()
	out, err := setupreport.Describe(ctx, topo, nc.ConnectedUrlRedacted(), *replicas, confirm)
	if err != nil {
		fmt.Fprintf(stderr, "jingwei setup: %v\n", err)
		return exitFailure
	}
	for _, p := range out.Replaced {
		fmt.Fprintf(stderr, "jingwei setup: protected stream %s was replaced (%s): recovery workers refuse to prepare and take over until you confirm it with --confirm-replaced %s\n", p.Stream, p.Reason, p.Stream)
	}
	code := exitOK
	if len(out.Replaced) > 0 {
		code = exitFailure
	}
	if *asJSON {
		_ = writeJSON(stdout, out)
		return code
	}
	setupreport.Write(stdout, out)
	return code
}

// setupOutput is what setup prints with --json.
type setupOutput = setupreport.Output
