package service_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
)

// Example serves jw.api.inspect with a stand-in handler (the recovery
// worker registers its real endpoints the same way) and asks it through
// the typed client: an answer, then an error answer, which comes back as a
// *schema.Error matched by its sentinel.
func Example() {
	ctx := context.Background()
	srv, err := streamtest.New(streamtest.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	svc, err := service.Start(ctx, service.Config{Conn: srv.Conn, Name: service.Name, Prefix: srv.Topology.Prefix},
		service.Endpoint{Name: service.EndpointInspect, Handler: func(ctx context.Context, body []byte) (any, error) {
			var t service.Target
			if err := service.DecodeBody(body, &t, false); err != nil {
				return nil, err
			}
			if t.CallID != "c-1" {
				return nil, schema.Errorf(schema.CodeUnknownCall, "no call %q in session %s", t.CallID, t.Session)
			}
			return schema.Assessment{Session: t.Session, CallID: t.CallID, Outcome: schema.OutcomeCompleted, Decision: schema.DecisionRefuse}, nil
		}})
	if err != nil {
		panic(err)
	}
	defer func() { _ = svc.Stop() }()

	cl := service.NewClient(srv.Conn, service.ClientConfig{Prefix: srv.Topology.Prefix})
	a, err := cl.Inspect(ctx, "s-1", "c-1")
	fmt.Println(a.Outcome, a.Decision, err)
	_, err = cl.Inspect(ctx, "s-1", "c-9")
	fmt.Println(errors.Is(err, schema.ErrUnknownCall), err)
	// Output:
	// completed refuse <nil>
	// true unknown_call: no call "c-9" in session s-1
}
