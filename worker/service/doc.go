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
// may be answered once). A handler returns a value or an error; the answer
// is sent through the micro request before the handler returns, so `nats
// micro stats` counts every request and every error answer. Concurrency
// comes from Config.Workers endpoint workers per endpoint, in one queue
// group.
package service
