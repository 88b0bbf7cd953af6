// Command mcptestserver is package mcptest's MCP server as a stdio
// process, for multi-process tests: configured by MCPTEST_NATS,
// MCPTEST_NKEY, MCPTEST_PREFIX and MCPTEST_HOLD.
package main

import "github.com/jingwei/jingwei/worker/mcptool/mcptest"

func main() { mcptest.Serve() }
