package toolworker

import (
	"cmp"
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
)

// leaseTopology returns the topology leases are written through
// (Config.LeaseTopology, or one on a connection of its own) and what
// closes it.
func (w *Worker) leaseTopology(ctx context.Context) (*stream.Topology, func()) {
	if w.cfg.LeaseTopology != nil {
		return w.cfg.LeaseTopology, func() {}
	}
	return w.ownTopology(ctx, "leases")
}

// ownTopology opens the worker's topology again on a connection of its
// own (the options of Topology's but its event handlers, named "<name>
// (what)") and returns it
// with what closes it; Topology itself, with a warning, when it cannot.
func (w *Worker) ownTopology(ctx context.Context, what string) (*stream.Topology, func()) {
	opts := w.topo.JS.Conn().Opts
	opts.Name = cmp.Or(opts.Name, "jingwei tool worker") + " (" + what + ")"
	// The connection's event handlers are not copied: they belong to
	// Topology's connection and whoever set them on it (a micro service
	// on it stops itself from its closed handler: copied, closing this
	// connection stopped that service).
	opts.ClosedCB, opts.DisconnectedCB, opts.DisconnectedErrCB, opts.ConnectedCB = nil, nil, nil, nil
	opts.ReconnectedCB, opts.DiscoveredServersCB, opts.AsyncErrorCB, opts.LameDuckModeHandler = nil, nil, nil, nil
	opts.ReconnectErrCB = nil
	nc, err := opts.Connect()
	if err != nil {
		w.log.Warn().Err(err).Str("for", what).Msg("no connection of its own: sharing the worker's connection")
		return w.topo, func() {}
	}
	var js jetstream.JetStream
	switch o := w.topo.JS.Options(); {
	case o.APIPrefix != "":
		js, err = jetstream.NewWithAPIPrefix(nc, o.APIPrefix)
	case o.Domain != "":
		js, err = jetstream.NewWithDomain(nc, o.Domain)
	default:
		js, err = jetstream.New(nc)
	}
	var t *stream.Topology
	if err == nil {
		t, err = stream.OpenTopology(ctx, js, w.topo.Config())
	}
	if err != nil {
		nc.Close()
		w.log.Warn().Err(err).Str("for", what).Msg("no topology of its own: sharing the worker's connection")
		return w.topo, func() {}
	}
	return t, nc.Close
}
