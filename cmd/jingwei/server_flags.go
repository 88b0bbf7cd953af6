package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// The connection flags themselves (--server, default $NATS_URL else
// nats://127.0.0.1:4222; --creds; --nkey; --tlsca; --prefix) are natsFlags
// in worker.go, shared by every command that talks to a server. This file
// holds what the read-only commands (export, and inspect/plan with
// --session) do with them.

// connect connects as the flags say, naming the connection after the
// command. Its error says what to do about a server that is not there. The
// caller closes the connection.
func (n *natsFlags) connect(ctx context.Context, name string, log zerolog.Logger) (*nats.Conn, error) {
	nkey, err := n.roleKeyFile(name)
	if err != nil {
		return nil, err
	}
	nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{
		URL: n.server, Creds: n.creds, NKeySeedFile: nkey, TLSCA: n.tlsca,
		Name: "jingwei " + name, Logger: log, ConnectTimeout: n.connectTimeout,
	})
	if err != nil {
		if isAuthError(err) {
			if role, ok := commandRole[name]; ok && nkey == "" && n.creds == "" {
				return nil, fmt.Errorf("%w (the server requires credentials: 'jingwei %s' connects as role %s with --auth DIR holding %s.nk, --nkey FILE or --creds FILE)", err, name, role, role)
			}
			return nil, err
		}
		return nil, &schema.Error{Code: schema.CodeUnreachable, Err: err,
			Message: fmt.Sprintf("%v (is a server running? start one with 'jingwei serve', or point --server/$NATS_URL at yours)", err)}
	}
	return nc, nil
}

// openTopology connects as the flags say and looks up jingwei's topology
// without creating anything. The caller closes the connection.
func (n *natsFlags) openTopology(ctx context.Context, name string) (*nats.Conn, *stream.Topology, error) {
	return n.topology(ctx, name, zerolog.Nop(), stream.TopologyConfig{Prefix: n.prefix}, false)
}

// ensureTopology connects as the flags say and creates (or checks) the
// topology of cfg (EnsureTopology); cfg.Prefix defaults to the flags'. The
// caller closes the connection.
func (n *natsFlags) ensureTopology(ctx context.Context, name string, log zerolog.Logger, cfg stream.TopologyConfig) (*nats.Conn, *stream.Topology, error) {
	return n.topology(ctx, name, log, cfg, true)
}

func (n *natsFlags) topology(ctx context.Context, name string, log zerolog.Logger, cfg stream.TopologyConfig, create bool) (*nats.Conn, *stream.Topology, error) {
	nc, err := n.connect(ctx, name, log)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	if cfg.Prefix == "" {
		cfg.Prefix = n.prefix
	}
	open := stream.OpenTopology
	if create {
		open = stream.EnsureTopology
	}
	topo, err := open(ctx, js, cfg)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, topo, nil
}

// loadSession loads a session's confirmed history from the server. Errors
// that are a *schema.Error (history_too_large, corrupt_history) are refusals;
// anything else is a failure to reach or read the server.
func (n *natsFlags) loadSession(ctx context.Context, name, session string) ([]schema.Event, error) {
	if !schema.ValidSession(session) {
		return nil, fmt.Errorf("%w: %q", stream.ErrInvalidSession, session)
	}
	nc, topo, err := n.openTopology(ctx, name)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	return topo.Logs().Load(ctx, session)
}

// partitionsFlag registers --partitions on fs: how many partitions the
// sessions are divided into (stream.TopologyConfig.Partitions), default
// stream.DefaultPartitions. Every process of a deployment must use the
// same number: EnsureTopology refuses another with a topology conflict
// naming partitions.
func partitionsFlag(fs *flag.FlagSet) *int {
	return fs.Int("partitions", stream.DefaultPartitions, fmt.Sprintf("partitions the sessions are divided into, 1 to %d (the same for every process of a deployment)", stream.MaxPartitions))
}

// checkPartitions returns the usage message for a --partitions out of
// range, or "".
func checkPartitions(n int) string {
	if n < 1 || n > stream.MaxPartitions {
		return fmt.Sprintf("--partitions %d: want 1 to %d", n, stream.MaxPartitions)
	}
	return ""
}
