package schema_test

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jingwei/jingwei/schema"
)

func ExampleDecodeHistory() {
	history := `{"v":1,"seq":1,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:01Z","type":"tool.call","call":{"call_id":"c-1","tool":"orders.create","arguments":{"sku":"A-1","qty":2},"start_marker":true,"operation":{"task":"t-1","key":"op-1","contract":{"effect":"idempotent","revision":"orders-v1"}}}}
{"v":1,"seq":2,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:02Z","type":"tool.started","started":{"call_id":"c-1"}}
{"v":1,"seq":3,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:03Z","type":"tool.result","result":{"call_id":"c-1","status":"failed","retryable":true,"error":"boom"}}
`
	events, err := schema.DecodeHistory(strings.NewReader(history), schema.Limits{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range events {
		fmt.Println(e.Seq, e.Type, e.CallID())
	}

	// A duplicate member name anywhere, arguments included, makes the
	// history corrupt; the error names the line.
	bad := history + `{"v":1,"seq":4,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:04Z","type":"tool.call","call":{"call_id":"c-2","tool":"orders.create","arguments":{"sku":"A-1","sku":"B-2"}}}` + "\n"
	_, err = schema.DecodeHistory(strings.NewReader(bad), schema.Limits{})
	fmt.Println(schema.CodeOf(err))
	fmt.Println(err)
	// Output:
	// 1 tool.call c-1
	// 2 tool.started c-1
	// 3 tool.result c-1
	// corrupt_history
	// corrupt_history: line 4: event is not valid: invalid JSON at byte 160: duplicate member name "sku"
}

func ExampleArgsDigest() {
	// Member order and whitespace do not matter, and numbers are compared
	// by value: 2.0 is 2.
	a, _ := schema.ArgsDigest(json.RawMessage(`{"sku":"A-1","qty":2}`))
	b, _ := schema.ArgsDigest(json.RawMessage(`{ "qty": 2.0, "sku": "A-1" }`))
	fmt.Println(a == b)
	fmt.Println(a)

	// A 64-bit id is never rounded to a double: these differ, where plain
	// RFC 8785 would print both as 1234567890123456800.
	x, _ := schema.Canonical(json.RawMessage(`{"id":1234567890123456789}`))
	y, _ := schema.Canonical(json.RawMessage(`{"id":1234567890123456790}`))
	fmt.Println(string(x))
	fmt.Println(string(y))
	// Output:
	// true
	// sha256:3e2ac8717ff0cc0e1d7e17074c04e8d66bfaafd84035efad486f7778c07d7de3
	// {"id":1234567890123456789}
	// {"id":1234567890123456790}
}
