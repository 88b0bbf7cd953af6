package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/httptool"
	"github.com/jingwei/jingwei/worker/mcptool"
)

// Set is a loaded catalog with its MCP backends (one session per server).
// It lives as long as the tool worker; Close ends the servers' sessions.
type Set struct {
	cat     *Catalog
	servers map[string]*mcptool.Backend
	log     zerolog.Logger
	// HTTPClient is used by the HTTP tools; nil: http.DefaultClient.
	HTTPClient *http.Client
}

// Open returns the set of cat; no server is contacted yet.
func Open(cat *Catalog, log zerolog.Logger) *Set {
	s := &Set{cat: cat, servers: map[string]*mcptool.Backend{}, log: log}
	for name, sv := range cat.Servers {
		s.servers[name] = mcptool.New(ServerConfig(name, sv))
	}
	return s
}

// ServerConfig is the mcptool configuration of server name, with ${VAR}
// in its command, args, env values, dir, url and header values replaced by
// the environment's VAR (empty when unset).
func ServerConfig(name string, sv Server) mcptool.Config {
	args := make([]string, len(sv.Args))
	for i, a := range sv.Args {
		args[i] = Expand(a)
	}
	return mcptool.Config{Name: name, Command: Expand(sv.Command), Args: args, Env: expandMap(sv.Env),
		Dir: Expand(sv.Dir), URL: Expand(sv.URL), Headers: expandMap(sv.Headers)}
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Expand replaces every ${VAR} in s by the environment's VAR (empty when
// unset). A lone $ and $VAR are left as they are.
func Expand(s string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	return envRef.ReplaceAllStringFunc(s, func(m string) string { return os.Getenv(m[2 : len(m)-1]) })
}

func expandMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = Expand(v)
	}
	return out
}

// Catalog returns the set's catalog.
func (s *Set) Catalog() *Catalog { return s.cat }

// Server returns the backend of the MCP server name.
func (s *Set) Server(name string) *mcptool.Backend { return s.servers[name] }

// Close ends every server's session.
func (s *Set) Close() {
	for _, b := range s.servers {
		_ = b.Close()
	}
}

// ServerNames returns the names of the catalog's servers, sorted.
func (s *Set) ServerNames() []string {
	out := make([]string, 0, len(s.servers))
	for n := range s.servers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ListTimeout bounds the connection and tools/list through which Tools
// reads an MCP server's input schemas: a server that hangs does not hold up
// the worker's start.
const ListTimeout = 10 * time.Second

// Tools returns the catalog's tools, ready for worker.NewRegistry.
// builtin are the example tools a builtin entry may name (their contract
// stays theirs unless the entry declares one). An MCP tool's input schema
// is the entry's input_schema, else the server's inputSchema from
// tools/list; a server that cannot be reached now leaves its tools without
// a schema (the server checks its arguments itself), logged at warn.
func (s *Set) Tools(ctx context.Context, builtin []worker.Tool) ([]worker.Tool, error) {
	byName := map[string]worker.Tool{}
	for _, t := range builtin {
		byName[t.Metadata.Name] = t
	}
	var out []worker.Tool
	for _, e := range s.cat.Tools {
		timeout, _ := parseDuration(e.Timeout)
		t := worker.Tool{
			Metadata: effect.Metadata{Name: e.Name, Description: e.Description, Contract: e.EffectContract(),
				Probe: e.Probe, AuthoritativeNotFound: e.AuthoritativeNotFound},
			Timeout: timeout,
		}
		if e.InputSchema != nil {
			t.InputSchema, _ = json.Marshal(e.InputSchema)
		}
		switch {
		case e.Builtin != "":
			bt, ok := byName[e.Builtin]
			if !ok {
				return nil, fmt.Errorf("%w: tool %q: no built-in tool %q", ErrInvalid, e.Name, e.Builtin)
			}
			if e.Contract == nil {
				t.Metadata.Contract = bt.Metadata.Contract
			}
			if e.Probe == "" {
				t.Metadata.Probe, t.Metadata.AuthoritativeNotFound = bt.Metadata.Probe, bt.Metadata.AuthoritativeNotFound
			}
			if t.InputSchema == nil {
				t.InputSchema = bt.InputSchema
			}
			if e.Description == "" {
				t.Metadata.Description = bt.Metadata.Description
			}
			if t.Timeout == 0 {
				t.Timeout = bt.Timeout
			}
			t.CheckArguments, t.OutputLimit, t.Body = bt.CheckArguments, bt.OutputLimit, bt.Body
		case e.HTTP != nil:
			t.Body = httptool.Endpoint{
				Method: e.HTTP.Method, URL: Expand(e.HTTP.URL), Headers: expandMap(e.HTTP.Headers),
				NoBody: e.HTTP.Body == "none", Client: s.HTTPClient,
			}.Body()
		case e.MCP != nil:
			b := s.servers[e.MCP.Server]
			name := e.MCP.Tool
			if name == "" {
				name = e.Name
			}
			if t.InputSchema == nil {
				lctx, cancel := context.WithTimeout(ctx, ListTimeout)
				tools, err := b.Tools(lctx)
				cancel()
				if err != nil {
					s.log.Warn().Err(err).Str("tool", e.Name).Msg("MCP server unreachable: the tool runs without an input schema until the worker restarts")
				} else if mt, ok := tools[name]; !ok {
					s.log.Warn().Str("tool", e.Name).Str("server", e.MCP.Server).Msg("the MCP server has no such tool ('jingwei tools check')")
				} else if mt.InputSchema != nil {
					t.InputSchema, _ = json.Marshal(mt.InputSchema)
				}
				if t.Metadata.Description == "" {
					if mt, ok := b.ToolInfo(name); ok {
						t.Metadata.Description = mt.Description
					}
				}
			}
			t.Body = b.Body(name)
		}
		if e.Approval != nil {
			t.Approval, _ = e.Approval.rule()
		}
		out = append(out, t)
	}
	return out, nil
}
