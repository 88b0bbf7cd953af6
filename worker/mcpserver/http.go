package mcpserver

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tokens maps a bearer token to the agent it authenticates.
type Tokens map[string]string

// agent returns the agent of the request's bearer token.
func (t Tokens) agent(r *http.Request) (string, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return "", false
	}
	for k, agent := range t {
		if subtle.ConstantTimeCompare([]byte(k), []byte(tok)) == 1 {
			return agent, true
		}
	}
	return "", false
}

// maxBody bounds the request body HTTP reads to find a JSON-RPC id.
const maxBody = mcp.DefaultMaxRequestBodyBytes

// HTTP serves s over streamable HTTP. With tokens, every request needs
// Authorization: Bearer <token> (401 otherwise) and its calls are the
// token's agent's; without, anyone who reaches the address may call (serve
// it on loopback only). An MCP session idle for 30 minutes is closed. The JSON-RPC id of a tools/call is handed to the
// tool handler (HeaderRPCID) so that a re-sent request maps to the same
// jingwei request id.
func HTTP(s *mcp.Server, tokens Tokens) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{SessionTimeout: 30 * time.Minute})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(HeaderAgent)
		r.Header.Del(HeaderRPCID)
		if len(tokens) > 0 {
			agent, ok := tokens.agent(r)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="jingwei"`)
				http.Error(w, errUnauthorized.Error(), http.StatusUnauthorized)
				return
			}
			r.Header.Set(HeaderAgent, agent)
		}
		if r.Method == http.MethodPost && r.Body != nil {
			b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
			if err != nil {
				http.Error(w, "body unreadable", http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
			var msg struct {
				Method string          `json:"method"`
				ID     json.RawMessage `json:"id"`
			}
			if json.Unmarshal(b, &msg) == nil && msg.Method == "tools/call" && len(msg.ID) > 0 {
				r.Header.Set(HeaderRPCID, string(msg.ID))
			}
		}
		h.ServeHTTP(w, r)
	})
}
