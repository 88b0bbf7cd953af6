// Package service is the `jingwei` request-reply API on NATS (jw.api.*):
// the endpoint names, the request and answer bodies, a typed Client, and
// the one helper both serving processes register their endpoints with.
//
// # Endpoints and who serves them
//
//	endpoint          request         answer             served by
//	jw.api.call       schema.Request  schema.Event       tool workers (GatewayName, toolworker.Gateway)
//	jw.api.inspect    Target          schema.Assessment  the recovery worker (Name)
//	jw.api.prepare    Target          schema.Plan        the recovery worker
//	jw.api.status     StatusRequest   Status             the recovery worker
//
// jw.api.call is served where calls are made: a tool worker's gateway
// publishes the request on the work queue and answers from the stored
// session log (or with the code recorded on jw.answers.<session>). The
// other three are the recovery worker's. They are two micro services,
// "jingwei" and "jingwei-gateway", so `nats micro ls` shows both and
// every instance of one service serves the same endpoints.
//
// # Tenants
//
// jw.api.call and jw.api.status (TenantScoped) are also served on
// jw.api.call.* and jw.api.status.*, which only a tenant's account reaches,
// through an import that maps its plain jw.api.call to
// jw.api.call.<tenant> (stream.Tenant): the last token is the caller's
// tenant, set by the server. A handler reads it with Caller(ctx) ("" on
// the plain subject: an operator's or the fleet-wide agent's request) and
// refuses a session the tenant does not own with CheckSession (forbidden).
//
// Every error answer, on every endpoint, is the one error body of package
// schema ({"error":{"code","message",…}}, schema.ErrorBody) with the same
// code and message in micro's error headers. Every endpoint advertises the
// JSON Schema files of its bodies as metadata (MetaRequestSchema,
// MetaResponseSchema, MetaErrorSchema), by the names schema.Files holds.
//
// # Client
//
//	cl := service.NewClient(nc, service.ClientConfig{Prefix: "jw"})
//	plan, err := cl.Prepare(ctx, "s-1", "c-2")
//	if errors.Is(err, schema.ErrNeedsReview) { … }
//
// Methods take ctx first and return a *schema.Error for an error answer,
// ErrNoService when nobody serves the endpoint, and a no_answer
// *schema.Error when no answer came within ClientConfig.Timeout.
//
// # Serving
//
// Start registers a micro service and its endpoints on one connection (one
// connection carries one micro service: under jingwei's roles each request
// may be answered once). A handler returns a value or an error. Each
// endpoint has Config.Workers micro endpoints in one queue group, which
// the server picks from at random; a worker runs the handler in a
// goroutine and waits Config.AnswerWait for it: an answer in time is sent
// through the micro request (micro counts it, its error and its time), a
// later one by that goroutine on the reply subject in micro's format, and
// counted in the endpoint's stats data (EndpointData; Errors adds both).
// So a slow request never holds a worker, and a quick one never waits
// behind it; Config.MaxInFlight bounds the requests being answered.
package service
