package schema

import (
	"embed"
	"io/fs"
)

//go:embed *.schema.json
var files embed.FS

// SchemaFiles names the JSON Schema files (draft 2020-12) Files holds: one
// per message on the wire (events, reviews, plans, assessment messages —
// assessmentmessage.schema.json: one assessment, assessment.schema.json,
// or a batch of them —, tool requests, approvals, approval requests and
// task stops), one per body of the `jingwei` services (target, status
// request, status answer; call answers with an event, inspect with an
// assessment, prepare with a plan), the error body, and the jw_plans
// record. Their $id is SchemaBaseURL + name, and they
// refer to each other by relative name (plan.schema.json uses
// event.schema.json#/$defs/contract, for instance).
var SchemaFiles = []string{
	"event.schema.json",
	"review.schema.json",
	"plan.schema.json",
	"assessment.schema.json",
	"assessmentmessage.schema.json",
	"request.schema.json",
	"target.schema.json",
	"statusrequest.schema.json",
	"status.schema.json",
	"errorbody.schema.json",
	"planrecord.schema.json",
	"approval.schema.json",
	"approvalrequest.schema.json",
	"taskstop.schema.json",
	"catalog.schema.json",
	"historyrequest.schema.json",
	"historypage.schema.json",
}

// SchemaBaseURL is the base of the schema files' $id.
const SchemaBaseURL = "https://github.com/jingwei/jingwei/schema/"

// Files returns the JSON Schema files, for tools that serve or export them
// (agents in other languages build against them). The files are embedded in
// the binary; the returned FS is read-only and safe for concurrent use.
func Files() fs.FS { return files }
