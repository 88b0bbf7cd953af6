package stream_test

import (
	"fmt"

	"github.com/jingwei/jingwei/stream"
)

// ExampleRoleConfig_Subjects prints what an agent may publish with the
// default prefixes: its requests, two service endpoints, reads of the
// session logs, and stream metadata. Everything else is refused by the
// server.
func ExampleRoleConfig_Subjects() {
	p := stream.RoleConfig{}.Subjects(stream.RoleAgent)
	for _, s := range p.PublishAllow {
		fmt.Println(s)
	}
	fmt.Println("subscribe:", p.SubscribeAllow)
	// Output:
	// $JS.API.DIRECT.GET.JW_EVENTS
	// $JS.API.DIRECT.GET.JW_EVENTS.>
	// $JS.API.INFO
	// $JS.API.STREAM.INFO.*
	// $JS.API.STREAM.MSG.GET.JW_EVENTS
	// jw.api.call
	// jw.api.status
	// jw.requests.*
	// subscribe: [_INBOX.> jw.events.>]
}
