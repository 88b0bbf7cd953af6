package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
)

// TestCaller: a tenant-scoped endpoint (status) is also served on
// jw.api.status.<tenant>, whose handler learns the tenant (Caller) and may
// answer it only about its sessions (CheckSession); the plain subject has
// no caller and may ask about any session; an endpoint that is not tenant
// scoped (inspect) has no tenant subject, and a last token that is no
// tenant name is forbidden before the handler runs.
func TestCaller(t *testing.T) {
	_, nc, topo := streamtest.StartWith(t, streamtest.Config{})
	ctx := context.Background()
	handler := func(ctx context.Context, body []byte) (any, error) {
		if err := service.CheckSession(ctx, string(body)); err != nil {
			return nil, err
		}
		return service.Caller(ctx), nil
	}
	svc, err := service.Start(ctx, service.Config{Conn: nc, Name: service.Name, Prefix: topo.Prefix, Workers: 2},
		service.Endpoint{Name: service.EndpointStatus, Handler: handler},
		service.Endpoint{Name: service.EndpointInspect, Handler: handler})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	ask := func(subject, session string) (string, string, error) {
		m, err := nc.Request(subject, []byte(session), 5*time.Second)
		if err != nil {
			return "", "", err
		}
		if code := service.AnswerCode(m); code != "" {
			return "", code, nil
		}
		var caller string
		if err := json.Unmarshal(m.Data, &caller); err != nil {
			t.Fatalf("%s: %s", subject, m.Data)
		}
		return caller, "", nil
	}
	for _, c := range []struct {
		subject, session, caller, code string
	}{
		{"jw.api.status", "beta-1", "", ""},
		{"jw.api.status.acme", "acme-1", "acme", ""},
		{"jw.api.status.acme", "beta-1", "", string(schema.CodeForbidden)},
		{"jw.api.status.acme", "acme_x-1", "", string(schema.CodeForbidden)},
		{"jw.api.status.acme", "s-1", "", string(schema.CodeForbidden)},
		{"jw.api.status.a-b", "a-1", "", string(schema.CodeForbidden)},
		{"jw.api.inspect", "beta-1", "", ""},
	} {
		caller, code, err := ask(c.subject, c.session)
		if err != nil || caller != c.caller || code != c.code {
			t.Errorf("%s about %s: caller %q code %q %v, want %q %q", c.subject, c.session, caller, code, err, c.caller, c.code)
		}
	}
	if _, _, err := ask("jw.api.inspect.acme", "acme-1"); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("jw.api.inspect.acme: %v, want no responders", err)
	}
	if service.Caller(ctx) != "" || service.CheckSession(ctx, "any-1") != nil {
		t.Error("a ctx not from a handler has a caller")
	}
}
