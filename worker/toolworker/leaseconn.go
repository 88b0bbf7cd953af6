package toolworker

import (
	"cmp"
	"context"
	"reflect"

	"github.com/nats-io/nats.go"
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
// own (connOptions of Topology's, named "<name> (what)") and returns it
// with what closes it; Topology itself, with a warning, when it cannot.
func (w *Worker) ownTopology(ctx context.Context, what string) (*stream.Topology, func()) {
	opts := connOptions(w.topo.JS.Conn())
	opts.Name = cmp.Or(opts.Name, "jingwei tool worker") + " (" + what + ")"
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

// connOptions returns nc's options without its event handlers (the
// fields named ...CB and ...Handler that report the connection's events:
// closed, disconnected, reconnected, errors, lame duck). Those belong to
// nc and whoever set them on it: a micro service stops itself from the
// closed handler it sets, so a copy closed with another connection
// stopped it. The fields are read one by one, the handlers never: they
// may be set on nc meanwhile (micro.AddService does, under nc's lock).
func connOptions(nc *nats.Conn) nats.Options {
	var out nats.Options
	src := reflect.ValueOf(&nc.Opts).Elem()
	dst := reflect.ValueOf(&out).Elem()
	for i := range src.NumField() {
		f := src.Type().Field(i)
		if !f.IsExported() || eventHandlers[f.Name] {
			continue
		}
		dst.Field(i).Set(src.Field(i))
	}
	return out
}

// eventHandlers are the nats.Options fields connOptions leaves out.
var eventHandlers = map[string]bool{
	"ClosedCB": true, "DisconnectedCB": true, "DisconnectedErrCB": true, "ConnectedCB": true,
	"ReconnectedCB": true, "DiscoveredServersCB": true, "AsyncErrorCB": true, "ReconnectErrCB": true,
	"LameDuckModeHandler": true,
}
