package service_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
)

// TestErrorHeaderIsNumeric: an error answer read by a plain NATS client,
// as any micro client reads it: Nats-Service-Error-Code is a number (the
// micro protocol's), Nats-Service-Error starts with the jingwei code, and
// the body is the error body with the jingwei code.
func TestErrorHeaderIsNumeric(t *testing.T) {
	_, nc, topo := streamtest.StartWith(t, streamtest.Config{})
	ctx := context.Background()
	codes := map[string]schema.Code{"needs": schema.CodeNeedsReview, "bad": schema.CodeBadRequest, "forbid": schema.CodeForbidden, "busy": schema.CodeBusy, "plain": ""}
	handler := func(ctx context.Context, body []byte) (any, error) {
		c := codes[string(body)]
		if c == "" {
			return nil, context.DeadlineExceeded // an uncoded error: internal
		}
		return nil, schema.Errorf(c, "why\nnot")
	}
	svc, err := service.Start(ctx, service.Config{Conn: nc, Name: service.Name, Prefix: topo.Prefix, Workers: 2},
		service.Endpoint{Name: service.EndpointInspect, Handler: handler})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	for body, want := range map[string]struct{ status, code string }{
		"needs": {"409", "needs_review"}, "bad": {"400", "bad_request"}, "forbid": {"403", "forbidden"}, "busy": {"429", "busy"}, "plain": {"500", "internal"},
	} {
		m, err := nc.Request("jw.api.inspect", []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		status := m.Header.Get(micro.ErrorCodeHeader)
		if _, err := strconv.Atoi(status); err != nil || status != want.status {
			t.Errorf("%s: %s = %q, want %s", body, micro.ErrorCodeHeader, status, want.status)
		}
		if desc := m.Header.Get(micro.ErrorHeader); !strings.HasPrefix(desc, want.code+": ") || strings.ContainsAny(desc, "\r\n") {
			t.Errorf("%s: %s = %q, want %q first, one line", body, micro.ErrorHeader, desc, want.code)
		}
		if e, ok := schema.DecodeErrorBody(m.Data); !ok || string(e.Code) != want.code {
			t.Errorf("%s: body %s, want code %s", body, m.Data, want.code)
		}
		if got := service.AnswerCode(m); got != want.code {
			t.Errorf("%s: AnswerCode %q", body, got)
		}
	}
}
