package service

import (
	"context"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/access"
)

// TenantScoped reports whether endpoint is also served for tenant-scoped
// agents, on <prefix>.api.<endpoint>.<tenant> (stream.TenantEndpoints:
// call and status). A tenant's account imports that subject as the plain
// endpoint subject, so the tenant is set by the server, never chosen by
// the client.
func TenantScoped(endpoint string) bool {
	for _, e := range access.TenantEndpoints {
		if e == endpoint {
			return true
		}
	}
	return false
}

type callerKey struct{}

// withCaller returns ctx carrying the tenant a request came from.
func withCaller(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, callerKey{}, tenant)
}

// Caller returns the tenant a handler's request came from: the last token
// of the subject it arrived on (jw.api.call.<tenant>), which the tenant's
// account import sets; "" for a request on the plain endpoint subject
// (jw.api.call), which only the fleet-wide roles (agent, host, reviewer)
// and the trusted account reach and which may ask about every session. A
// key for per-caller limits. Safe on any ctx (one not from a handler:
// "").
func Caller(ctx context.Context) string {
	t, _ := ctx.Value(callerKey{}).(string)
	return t
}

// CheckSession returns nil when the handler's caller may ask about
// session: every caller but a tenant may; a tenant only about its own
// sessions (stream.TenantOwns). Otherwise a forbidden *schema.Error.
func CheckSession(ctx context.Context, session string) error {
	t := Caller(ctx)
	if t == "" || access.TenantOwns(t, session) {
		return nil
	}
	return schema.Errorf(schema.CodeForbidden, "session %q is not one of tenant %s's sessions (they begin with %q)", session, t, t+access.TenantSeparator)
}
