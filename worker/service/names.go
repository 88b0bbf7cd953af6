package service

// Name is the micro service name of the recovery worker's endpoints
// (inspect, prepare, status, history): `nats micro ls` shows it.
const Name = "jingwei"

// GatewayName is the micro service name of the tool workers' call
// endpoint (jw.api.call). It is a sibling of Name rather than more
// instances of it: micro expects every instance of one service to serve
// the same endpoints, and the call endpoint is served where calls are
// made, by the tool workers, while the others are the recovery worker's.
const GatewayName = "jingwei-gateway"

// Version is the version both services advertise.
const Version = "0.2.0"

// Endpoint names; each is served on <prefix>.api.<name> (jw.api.call, …;
// stream.APISubject builds the subject).
const (
	// EndpointCall runs a tool request and answers with its tool.result
	// (request schema.Request, answer schema.Event). Served by the tool
	// workers (GatewayName).
	EndpointCall = "call"
	// EndpointInspect classifies a call (request Target, answer
	// schema.Assessment). Served by the recovery worker (Name).
	EndpointInspect = "inspect"
	// EndpointPrepare issues the retry plan of a call (request Target,
	// answer schema.Plan). Served by the recovery worker.
	EndpointPrepare = "prepare"
	// EndpointStatus reports open calls, calls awaiting review and plans
	// (request StatusRequest, answer Status). Served by the recovery
	// worker.
	EndpointStatus = "status"
	// EndpointHistory answers one page of a session's log: its stored
	// events from a sequence on (request HistoryRequest, answer
	// HistoryPage). Served by the recovery worker; tenant-scoped like
	// status (a tenant reads its own sessions only).
	EndpointHistory = "history"
)

// Metadata keys every endpoint advertises (micro.WithEndpointMetadata):
// the JSON Schema files of its request and answer bodies, by the names
// schema.Files holds ($id schema.SchemaBaseURL + name). Error answers of
// every endpoint are errorbody.schema.json.
const (
	MetaRequestSchema  = "request_schema"
	MetaResponseSchema = "response_schema"
	MetaErrorSchema    = "error_schema"
)

// schemaFiles names, per endpoint, the schema files of its request and
// answer.
var schemaFiles = map[string][2]string{
	EndpointCall:    {"request.schema.json", "event.schema.json"},
	EndpointInspect: {"target.schema.json", "assessment.schema.json"},
	EndpointPrepare: {"target.schema.json", "plan.schema.json"},
	EndpointStatus:  {"statusrequest.schema.json", "status.schema.json"},
	EndpointHistory: {"historyrequest.schema.json", "historypage.schema.json"},
}

// EndpointMetadata returns the metadata an endpoint advertises: its
// request, answer and error schema files.
func EndpointMetadata(endpoint string) map[string]string {
	f := schemaFiles[endpoint]
	return map[string]string{MetaRequestSchema: f[0], MetaResponseSchema: f[1], MetaErrorSchema: "errorbody.schema.json"}
}
