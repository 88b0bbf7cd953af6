package statustable

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/service"
)

// Source is where a View is read from: the status service, and the plans
// bucket of the topology Prefix on NC, read within Timeout.
type Source struct {
	Service *service.Client
	NC      *nats.Conn
	Prefix  string
	Timeout time.Duration
}

// Load asks the service for its status (of session, with call's reviews
// when call is given) and reads the plans, of session or all, newest
// first.
func (s Source) Load(ctx context.Context, session, call string) (View, error) {
	var v View
	st, err := s.Service.Status(ctx, service.StatusRequest{Session: session, CallID: call})
	if err != nil {
		return v, err
	}
	v.Status = st
	plans, err := s.plans(ctx, session)
	if err != nil {
		return v, err
	}
	v.Plans = plans
	return v, nil
}

// plans reads every plan record in <prefix>_plans, of one session or all,
// newest first.
func (s Source) plans(ctx context.Context, session string) ([]stream.PlanRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	js, err := jetstream.New(s.NC)
	if err != nil {
		return nil, err
	}
	topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{Prefix: s.Prefix})
	if err != nil {
		return nil, err
	}
	return topo.Plans().ListPlans(ctx, session)
}
