package main

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"net"
	"os"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/stream/access"
)

func init() {
	register(command{name: "serve", summary: "all in one: embedded NATS with JetStream, the recovery worker and a tool worker", run: runServe})
}

const serveHelp = `  jingwei serve [--listen 127.0.0.1:4222] [--data ./.jingwei] [--sync always|interval]
                [--trust-reviewers FILE] [--auto-plan] [--no-worker] [--no-prober] [--lease-ttl 10s]
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
role in DATA/auth (agent, reviewer, host, worker, recoverer, prober, admin; files
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

It also creates a review-signing key in DATA/review-signer.nk (not the
reviewer role's connection key DATA/auth/reviewer.nk; a DATA/reviewer.nk of
an older serve is renamed) and trusts it; sign reviews with: jingwei review
--key DATA/review-signer.nk …
--trust-reviewers FILE trusts more keys (lines "<public key> <name>").

It also runs a prober (docs/protocol.md §10.1) with the example tools'
probes, signing with its own key DATA/prober.nk, which the recovery worker
trusts as a prober's (never as a person's): an uncertain payment is settled
by reading the ledger back after raising its fence (completed when the
charge is there, not_executed when it is not), without a person; what the
probe cannot decide still waits for one. The prober connects as the prober
role (DATA/auth/prober.nk): it may read the session logs, read and fence the
example tools' data and publish reviews, and nothing else (no jw.api.call,
no events, plans or approvals). --no-prober runs none.

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

// reviewerKeyFile is the review-signing seed serve creates in its data
// directory: not DATA/auth/reviewer.nk, the reviewer role's connection
// key. Until December 2026 it was DATA/reviewer.nk (legacyReviewerKeyFile),
// which serve renames on start.
const reviewerKeyFile = "review-signer.nk"

// legacyReviewerKeyFile is the review-signing seed's former name.
const legacyReviewerKeyFile = "reviewer.nk"

// authSubdir is where serve keeps the role credentials (DATA/auth).
const authSubdir = "auth"

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

// renameLegacyKey moves a key file from its former name to its name,
// unless a file of that name exists already.
func renameLegacyKey(legacy, path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if _, err := os.Stat(legacy); err != nil {
		return nil
	}
	return os.Rename(legacy, path)
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
