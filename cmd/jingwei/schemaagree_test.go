package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jingwei/jingwei/schema/schematest"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/worker/service"
)

// malformed are the codes of a request the service refuses for its body.
var malformed = map[string]bool{"bad_request": true, "invalid_request": true, "field_too_long": true, "request_too_large": true}

// TestSchemasAgreeWithTheService sends the same request bodies to a live
// serve's endpoints (a plain NATS client with the agent's, or for inspect
// the host's, credentials) and to the endpoint's request schema
// (service.EndpointMetadata): the service refuses a body as malformed
// exactly when the schema refuses it. The few bodies on which the service
// is stricter by design are listed with the reason, and the test holds
// that too: a JSON Schema validates the JSON data model, in which member
// names are unique, strings are Unicode (a lone surrogate escape is no
// string) and maxLength counts code points, where jingwei counts UTF-8
// bytes.
func TestSchemasAgreeWithTheService(t *testing.T) {
	schemas := schematest.Schemas(t)
	dir := filepath.Join(t.TempDir(), "data")
	url, _, _ := startServe(t, dir)
	conns := map[access.Role]*nats.Conn{access.RoleAgent: connectRole(t, url, dir, access.RoleAgent), access.RoleHost: connectRole(t, url, dir, access.RoleHost)}
	for _, nc := range conns {
		defer nc.Close()
	}
	awaitServices(t, conns[access.RoleAgent])
	n := 0
	call := func(extra string) string {
		n++
		return fmt.Sprintf(`{"v":1,"request_id":"r-%d","session":"ag-1","task":"t-1","tool":"catalog.lookup","arguments":{"sku":"A-1"}%s}`, n, extra)
	}
	callID := func(id string) string {
		return `{"v":1,"request_id":"` + id + `","session":"ag-1","task":"t-1","tool":"catalog.lookup","arguments":{"sku":"A-1"}}`
	}
	cases := []struct {
		endpoint string
		body     string
		// stricter, when set, is why the service refuses a body its
		// schema accepts.
		stricter string
	}{
		{service.EndpointStatus, `{}`, ""},
		{service.EndpointStatus, `{"session":"s-1"}`, ""},
		{service.EndpointStatus, `{"Session":"x y"}`, ""},
		{service.EndpointStatus, `{"session":"s-1","SESSION":"s-2"}`, ""},
		{service.EndpointStatus, `{"session":"x y"}`, ""},
		{service.EndpointStatus, `{"session":"s-1","extra":1}`, ""},
		{service.EndpointStatus, `{"call_id":"c-1"}`, ""},
		{service.EndpointStatus, `[]`, ""},
		{service.EndpointStatus, `{"session":"s-1","session":"s-2"}`, "duplicate member names (the data model has none)"},
		{service.EndpointHistory, `{"v":1,"session":"s-1"}`, ""},
		{service.EndpointHistory, `{"v":1.0,"session":"s-1"}`, ""},
		{service.EndpointHistory, `{"v":10e-1,"session":"s-1","max_events":5.0}`, ""},
		{service.EndpointHistory, `{"v":2,"session":"s-1"}`, ""},
		{service.EndpointHistory, `{"session":"s-1"}`, ""},
		{service.EndpointHistory, `{"v":1,"session":"s-1","max_events":10001}`, ""},
		{service.EndpointHistory, `{"v":1,"session":"s-1","max_events":5.5}`, ""},
		{service.EndpointHistory, `{"v":1,"session":"s-1","from_seq":-1}`, ""},
		{service.EndpointHistory, `{"v":1,"Session":"s-1","session":"s-1"}`, ""},
		{service.EndpointInspect, `{"session":"s-1","call_id":"c-1"}`, ""},
		{service.EndpointInspect, `{"session":"s-1"}`, ""},
		{service.EndpointInspect, `{"session":"s-1","call_id":""}`, ""},
		{service.EndpointInspect, `{"session":"s-1","call_id":"` + strings.Repeat("a", 1200) + `"}`, ""},
		{service.EndpointInspect, `{"session":"s-1","Call_Id":"c-1","call_id":"c-1"}`, ""},
		{service.EndpointCall, call(""), ""},
		{service.EndpointCall, strings.Replace(call(""), `"v":1,`, `"v":1.0,`, 1), ""},
		{service.EndpointCall, strings.Replace(call(""), `"v":1,`, `"v":1.5,`, 1), ""},
		{service.EndpointCall, call(`,"extra":true`), ""},
		{service.EndpointCall, call(`,"Tool":"x"`), ""},
		{service.EndpointCall, callID(strings.Repeat("a", 1200)), ""},
		{service.EndpointCall, callID(strings.Repeat("é", 400)), ""},
		{service.EndpointCall, callID(strings.Repeat("€", 500)), "maxLength counts code points (500), jingwei UTF-8 bytes (1,500 > 1,024)"},
		{service.EndpointCall, callID(`r-\ud800`), "a lone surrogate escape is no Unicode string (a JSON Schema parser replaces it)"},
		{service.EndpointCall, call(`,"task":"t-2"`), "duplicate member names (the data model has none)"},
	}
	for _, c := range cases {
		reqSchema := service.EndpointMetadata(c.endpoint)[service.MetaRequestSchema]
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(c.body))
		schemaOK := err == nil && schemas[reqSchema].Validate(inst) == nil
		nc := conns[access.RoleAgent]
		if c.endpoint == service.EndpointInspect {
			nc = conns[access.RoleHost]
		}
		m, err := nc.Request("jw.api."+c.endpoint, []byte(c.body), 20*time.Second)
		if err != nil {
			t.Fatalf("%s %.80s: %v", c.endpoint, c.body, err)
		}
		code := service.AnswerCode(m)
		serviceOK := !malformed[code]
		switch {
		case c.stricter != "" && (serviceOK || !schemaOK):
			t.Errorf("%s %.80s: service accepts %v (%s), schema accepts %v: want the service alone to refuse (%s)", c.endpoint, c.body, serviceOK, code, schemaOK, c.stricter)
		case c.stricter == "" && serviceOK != schemaOK:
			t.Errorf("%s %.80s: service accepts %v (%s %.120s), schema %s accepts %v", c.endpoint, c.body, serviceOK, code, m.Data, reqSchema, schemaOK)
		}
	}
}
