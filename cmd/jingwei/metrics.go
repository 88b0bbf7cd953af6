package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jingwei/jingwei/metrics"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/recoverer"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// metricsFlag is --metrics ADDR of serve, worker, recover and console: the
// address of a Prometheus /metrics endpoint (package metrics).
type metricsFlag struct{ addr string }

func (m *metricsFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&m.addr, "metrics", envOr("JINGWEI_METRICS", ""), "serve Prometheus metrics on this address, host:port (GET /metrics); empty: none (env JINGWEI_METRICS)")
}

// metricsServer is the /metrics endpoint of one process: its registry and
// listener. A nil *metricsServer (no --metrics) does nothing.
type metricsServer struct {
	reg *prometheus.Registry
	ln  net.Listener
}

// listen opens the metrics listener at once (a taken port is said before
// anything starts); nil when --metrics is not given.
func (m *metricsFlag) listen() (*metricsServer, error) {
	if m.addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", m.addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", m.addr, err)
	}
	return &metricsServer{reg: metrics.NewRegistry(), ln: ln}, nil
}

// serve serves /metrics until ctx ends, in the background, and says where
// on stderr.
func (s *metricsServer) serve(ctx context.Context, name string, stderr io.Writer) {
	if s == nil {
		return
	}
	fmt.Fprintf(stderr, "jingwei %s: metrics on http://%s/metrics\n", name, s.ln.Addr())
	go func() {
		if err := metrics.Serve(ctx, s.ln, s.reg); err != nil {
			fmt.Fprintf(stderr, "jingwei %s: metrics: %v\n", name, err)
		}
	}()
}

// close closes the listener of a server that was never served.
func (s *metricsServer) close() {
	if s != nil {
		_ = s.ln.Close()
	}
}

// runtime returns the observer of a tool worker's runtimes (nil without
// --metrics).
func (s *metricsServer) runtime() worker.Observer {
	if s == nil {
		return nil
	}
	return metrics.NewRuntime(s.reg)
}

// leases exposes what a tool worker owns (its Stats).
func (s *metricsServer) leases(owned func() metrics.Ownership) {
	if s != nil {
		metrics.NewLeases(s.reg, owned)
	}
}

// recovery returns the observer to give a recoverer and the function to
// call with it once built (both no-ops without --metrics).
func (s *metricsServer) recovery() (recoverer.Observer, func(*recoverer.Recoverer)) {
	if s == nil {
		return nil, func(*recoverer.Recoverer) {}
	}
	m := metrics.NewRecovery(s.reg)
	return m, func(r *recoverer.Recoverer) { m.Source(r) }
}

// natsServer exports the embedded NATS server's own metrics.
func (s *metricsServer) natsServer(srv *server.Server) {
	if s != nil {
		metrics.NewNATSServer(s.reg, srv)
	}
}

// console returns the review console's metrics (nil without --metrics).
func (s *metricsServer) console() *metrics.Console {
	if s == nil {
		return nil
	}
	return metrics.NewConsole(s.reg)
}

// ownership reads what tw owns for the metrics (nothing while tw is nil).
func ownership(tw *toolworker.Worker) metrics.Ownership {
	if tw == nil {
		return metrics.Ownership{}
	}
	st := tw.Stats()
	return metrics.Ownership{Partitions: st.Partitions, Sessions: st.Sessions, Waiting: st.Waiting}
}
