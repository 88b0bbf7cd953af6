package access_test

import (
	"fmt"

	"github.com/jingwei/jingwei/stream/access"
)

// ExampleRoleConfig_Imports prints the agent's account and what it imports
// from the trusted account with the default prefixes: its requests, two
// service endpoints, reads of the session logs, and stream metadata. The
// agent's user may publish exactly these subjects and receive its replies;
// nothing else reaches the agent's account, and nothing the agent does
// reaches the trusted account but through these imports.
func ExampleRoleConfig_Imports() {
	rc := access.RoleConfig{}
	fmt.Println("account:", rc.AccountName(access.RoleAgent), "imports from", rc.AccountName(access.RoleWorker))
	for _, im := range rc.Imports(access.RoleAgent) {
		fmt.Println(im.Response, im.Subject)
	}
	fmt.Println("subscribe:", rc.Subjects(access.RoleAgent).SubscribeAllow)
	// Output:
	// account: JINGWEI_AGENT imports from JINGWEI
	// singleton $JS.API.INFO
	// singleton $JS.API.STREAM.INFO.JW_EVENTS
	// singleton $JS.API.STREAM.INFO.JW_REQUESTS
	// singleton $JS.API.STREAM.INFO.JW_REVIEWS
	// singleton $JS.API.STREAM.INFO.JW_PLANS
	// singleton $JS.API.STREAM.INFO.JW_ASSESSMENTS
	// singleton $JS.API.STREAM.INFO.JW_ANSWERS
	// singleton $JS.API.STREAM.INFO.JW_APPROVALS
	// singleton $JS.API.STREAM.INFO.KV_jw_leases
	// singleton $JS.API.STREAM.INFO.KV_jw_plans
	// singleton $JS.API.STREAM.INFO.KV_jw_budget
	// singleton jw.requests.*
	// singleton jw.api.call
	// singleton jw.api.status
	// singleton jw.api.history
	// singleton $JS.API.STREAM.MSG.GET.JW_EVENTS
	// stream $JS.API.DIRECT.GET.JW_EVENTS
	// singleton $JS.API.DIRECT.GET.JW_EVENTS.>
	// singleton $JS.API.STREAM.MSG.GET.JW_ANSWERS
	// stream $JS.API.DIRECT.GET.JW_ANSWERS
	// singleton $JS.API.DIRECT.GET.JW_ANSWERS.>
	// subscribe: [_INBOX.>]
}
