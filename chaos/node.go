package chaos

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// NodeConfig configures RunNode: one NATS node of a chaos run, with
// JetStream and the roles' accounts, alone or in a cluster.
type NodeConfig struct {
	// Name is the server name; a node restarted on the same Dir must keep
	// it (JetStream knows its peers by name). Required.
	Name string
	// Dir is the JetStream store directory. Required.
	Dir string
	// Listen is the client address, host:port. Required.
	Listen string
	// AuthDir is the role-credentials directory (stream.KeyDir): every
	// role's public key becomes a user of its role's account. Required:
	// a chaos node always runs with authorization on.
	AuthDir string
	// Sync is the durability mode. Defaults to stream.SyncInterval.
	Sync natsnode.SyncMode
	// ClusterName names the cluster; empty runs a single node (the cluster
	// fields below are then ignored).
	ClusterName string
	// ClusterListen is the route listener, host:port.
	ClusterListen string
	// Routes are the route URLs this node dials (nats-route://host:port,
	// the proxies in front of the other nodes).
	Routes []string
	// ClusterAdvertise is the route address this node advertises to the
	// others (a black hole in a chaos run, so that every route goes
	// through the proxies). Empty: the listener's own.
	ClusterAdvertise string
	// Logger receives the server's log. Defaults to zerolog.Nop().
	Logger zerolog.Logger
}

func (c NodeConfig) validate() error {
	switch {
	case c.Name == "" || c.Dir == "" || c.Listen == "" || c.AuthDir == "":
		return fmt.Errorf("%w: a node needs Name, Dir, Listen and AuthDir", ErrInvalidConfig)
	case c.ClusterName != "" && (c.ClusterListen == "" || len(c.Routes) == 0):
		return fmt.Errorf("%w: a cluster node needs ClusterListen and Routes", ErrInvalidConfig)
	}
	return nil
}

// RunNode runs one node until ctx ends, then shuts it down (flushing its
// store). It calls ready, if not nil, once the node accepts clients. The
// chaos harness runs it as a child process (`jingwei chaos node`), so that
// it can kill it with SIGKILL and start it again on the same store.
func RunNode(ctx context.Context, cfg NodeConfig, ready func(url string)) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.Sync == "" {
		cfg.Sync = natsnode.SyncInterval
	}
	users, err := access.KeyDir(cfg.AuthDir).PublicKeys()
	if err != nil {
		return fmt.Errorf("chaos node: role keys: %w", err)
	}
	ecfg := natsnode.EmbeddedConfig{
		Dir: cfg.Dir, Listen: cfg.Listen, Name: cfg.Name, Sync: cfg.Sync, Auth: access.Users{Keys: users},
		ReadyTimeout: 30 * time.Second, Logger: cfg.Logger,
	}
	if cfg.ClusterName != "" {
		host, port, err := splitHostPort(cfg.ClusterListen)
		if err != nil {
			return fmt.Errorf("%w: ClusterListen: %v", ErrInvalidConfig, err)
		}
		routes := server.RoutesFromStr(strings.Join(cfg.Routes, ","))
		if len(routes) != len(cfg.Routes) {
			return fmt.Errorf("%w: Routes %q", ErrInvalidConfig, cfg.Routes)
		}
		ecfg.Options = func(o *server.Options) {
			o.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: host, Port: port, Advertise: cfg.ClusterAdvertise}
			o.Routes = routes
		}
	}
	srv, err := natsnode.StartEmbedded(ctx, ecfg)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	if ready != nil {
		ready(srv.ClientURL())
	}
	<-ctx.Done()
	return nil
}

func splitHostPort(hp string) (string, int, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", hp)
	}
	return h, port, nil
}

// Args returns the command line (after the program name) of `jingwei chaos
// node` that runs cfg; the command parses exactly these flags back.
func (c NodeConfig) Args() []string {
	args := []string{"chaos", "node", "--name", c.Name, "--dir", c.Dir, "--listen", c.Listen, "--auth", c.AuthDir}
	if c.Sync != "" {
		args = append(args, "--sync", string(c.Sync))
	}
	if c.ClusterName != "" {
		args = append(args, "--cluster-name", c.ClusterName, "--cluster-listen", c.ClusterListen,
			"--routes", strings.Join(c.Routes, ","))
		if c.ClusterAdvertise != "" {
			args = append(args, "--cluster-advertise", c.ClusterAdvertise)
		}
	}
	return args
}
