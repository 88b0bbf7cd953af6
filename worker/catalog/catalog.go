// Package catalog loads a tool catalog: a YAML file that names the tools a
// tool worker runs without Go code of their own — tools of MCP servers
// (stdio or streamable HTTP), HTTP endpoints and the built-in example tools
// — each with its host-owned effect contract, timeout, approval policy and
// argument schema (docs/catalog.md, schema/catalog.schema.json).
//
// The contract is the host's, never the backend's: an MCP server's
// annotations (readOnlyHint, idempotentHint, destructiveHint) are hints,
// shown beside the contract by 'jingwei tools check' and never used to
// decide anything. A tool without a contract is unknown.
package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/worker"
)

// ErrInvalid is returned (wrapped, with the file's line where known) for a
// catalog that does not decode or breaks a rule of docs/catalog.md.
var ErrInvalid = errors.New("catalog: invalid")

// UnknownRevision is the revision of a tool the catalog declares no
// contract for: its effect is unknown.
const UnknownRevision = "undeclared"

// Catalog is a decoded catalog file.
type Catalog struct {
	// Version is the file format's version: 1.
	Version int `yaml:"version" json:"version"`
	// Servers are the MCP servers by name; every tool of one server shares
	// one MCP session.
	Servers map[string]Server `yaml:"servers,omitempty" json:"servers,omitempty"`
	// Tools are the catalog's tools.
	Tools []Entry `yaml:"tools" json:"tools"`
}

// Server is an MCP server: a stdio command or a streamable-HTTP URL.
type Server struct {
	// Command and Args start a stdio server; Env adds to its environment;
	// Dir is its working directory.
	Command string            `yaml:"command,omitempty" json:"command,omitempty"`
	Args    []string          `yaml:"args,omitempty" json:"args,omitempty"`
	Env     map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	Dir     string            `yaml:"dir,omitempty" json:"dir,omitempty"`
	// URL is a streamable-HTTP endpoint; Headers are sent with every
	// request (e.g. Authorization).
	URL     string            `yaml:"url,omitempty" json:"url,omitempty"`
	Headers map[string]string `yaml:"headers,omitempty" json:"headers,omitempty"`
}

// Entry is one tool of the catalog. Exactly one of MCP, HTTP and Builtin
// is its backend.
type Entry struct {
	// Name is the tool's name as agents call it.
	Name string `yaml:"name" json:"name"`
	// Description is free text for people and models.
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	// MCP: a tool of one of Servers.
	MCP *MCPBackend `yaml:"mcp,omitempty" json:"mcp,omitempty"`
	// HTTP: an HTTP endpoint.
	HTTP *HTTPBackend `yaml:"http,omitempty" json:"http,omitempty"`
	// Builtin names one of the example tools (orders.create,
	// payments.charge, catalog.lookup).
	Builtin string `yaml:"builtin,omitempty" json:"builtin,omitempty"`
	// Contract is the host-owned effect contract; nil: unknown.
	Contract *Contract `yaml:"contract,omitempty" json:"contract,omitempty"`
	// Timeout bounds one run ("30s"); empty: the worker's default.
	Timeout string `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Approval, when present, makes calls wait for a signed approval.
	Approval *Approval `yaml:"approval,omitempty" json:"approval,omitempty"`
	// InputSchema overrides the argument schema (for an MCP tool, the
	// server's inputSchema is used otherwise).
	InputSchema map[string]any `yaml:"input_schema,omitempty" json:"input_schema,omitempty"`
	// Probe names another tool of the catalog, declared read_only, that
	// finds out whether an uncertain call of this one took effect
	// (effect.Metadata.Probe, docs/protocol.md §10.1). Its output must be
	// {"answer": "found"|"not_found"|"unknown", "evidence": "…"}.
	Probe string `yaml:"probe,omitempty" json:"probe,omitempty"`
	// AuthoritativeNotFound, on a probe (a read_only tool), declares its
	// not_found authoritative: it raises the store's fence to the
	// session's epoch before it looks, or the backend deduplicates on the
	// operation key (effect.Metadata.AuthoritativeNotFound).
	AuthoritativeNotFound bool `yaml:"authoritative_not_found,omitempty" json:"authoritative_not_found,omitempty"`
}

// MCPBackend is a tool of an MCP server.
type MCPBackend struct {
	// Server names an entry of Catalog.Servers.
	Server string `yaml:"server" json:"server"`
	// Tool is the tool's name on the server; empty: the entry's name.
	Tool string `yaml:"tool,omitempty" json:"tool,omitempty"`
}

// HTTPBackend is an HTTP endpoint.
type HTTPBackend struct {
	// Method defaults to POST.
	Method string `yaml:"method,omitempty" json:"method,omitempty"`
	// URL may hold {field} placeholders, replaced by the (path-escaped)
	// top-level argument of that name.
	URL string `yaml:"url" json:"url"`
	// Headers are sent with every request.
	Headers map[string]string `yaml:"headers,omitempty" json:"headers,omitempty"`
	// Body is "arguments" (the call's arguments as the JSON body, the
	// default for POST, PUT and PATCH) or "none".
	Body string `yaml:"body,omitempty" json:"body,omitempty"`
}

// Contract is a host-owned effect contract.
type Contract struct {
	// Effect is read_only, idempotent, non_idempotent or unknown.
	Effect string `yaml:"effect" json:"effect"`
	// Revision names this version of the contract; bump it when the
	// tool's behaviour changes.
	Revision string `yaml:"revision" json:"revision"`
}

// Approval is an approval policy.
type Approval struct {
	// When is empty (every call waits) or FIELD>NUMBER: calls whose
	// numeric argument FIELD (a dotted path) is above NUMBER, or missing,
	// wait.
	When string `yaml:"when,omitempty" json:"when,omitempty"`
	// Timeout is how long a call waits for its answer ("5m"); empty:
	// worker.DefaultApprovalTimeout.
	Timeout string `yaml:"timeout,omitempty" json:"timeout,omitempty"`
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,128}$`)

// Load reads and validates the catalog file at path.
func Load(path string) (*Catalog, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes a catalog strictly (an unknown field is an error, with its
// line) and validates it.
func Parse(b []byte) (*Catalog, error) {
	var c Catalog
	if err := yaml.UnmarshalWithOptions(b, &c, yaml.Strict()); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, yaml.FormatError(err, false, true))
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks the rules the decoder cannot: one backend per tool,
// known servers and effects, unique names, parseable durations and
// approval conditions.
func (c *Catalog) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	if c.Version != 1 {
		return bad("version must be 1, not %d", c.Version)
	}
	for name, s := range c.Servers {
		if (s.Command == "") == (s.URL == "") {
			return bad("server %q: give exactly one of command and url", name)
		}
		if s.URL != "" && (len(s.Args) > 0 || len(s.Env) > 0 || s.Dir != "") {
			return bad("server %q: args, env and dir are for a command", name)
		}
		if s.Command != "" && len(s.Headers) > 0 {
			return bad("server %q: headers are for a url", name)
		}
	}
	seen := map[string]bool{}
	for i, e := range c.Tools {
		where := fmt.Sprintf("tools[%d] %q", i, e.Name)
		if !nameRE.MatchString(e.Name) {
			return bad("%s: name must be 1-128 of A-Z a-z 0-9 _ . -", where)
		}
		if seen[e.Name] {
			return bad("%s: a second tool of that name", where)
		}
		seen[e.Name] = true
		n := 0
		if e.MCP != nil {
			n++
			if _, ok := c.Servers[e.MCP.Server]; !ok {
				return bad("%s: mcp.server %q is not in servers", where, e.MCP.Server)
			}
		}
		if e.HTTP != nil {
			n++
			if e.HTTP.URL == "" {
				return bad("%s: http.url is required", where)
			}
			switch e.HTTP.Body {
			case "", "arguments", "none":
			default:
				return bad("%s: http.body must be arguments or none", where)
			}
		}
		if e.Builtin != "" {
			n++
		}
		if n != 1 {
			return bad("%s: give exactly one backend (mcp, http or builtin)", where)
		}
		if _, err := e.contract(); err != nil {
			return bad("%s: %v", where, err)
		}
		if _, err := parseDuration(e.Timeout); err != nil {
			return bad("%s: timeout: %v", where, err)
		}
		if e.Approval != nil {
			if _, err := e.Approval.rule(); err != nil {
				return bad("%s: approval: %v", where, err)
			}
		}
		if e.InputSchema != nil {
			if _, err := json.Marshal(e.InputSchema); err != nil {
				return bad("%s: input_schema: %v", where, err)
			}
		}
		if e.AuthoritativeNotFound && e.EffectContract().Effect != effect.ReadOnly {
			return bad("%s: authoritative_not_found is for a probe, a read_only tool", where)
		}
	}
	return c.checkProbes()
}

// checkProbes checks that every probe a tool names is another tool of the
// catalog declared read_only: a prober never runs anything else.
func (c *Catalog) checkProbes() error {
	byName := map[string]Entry{}
	for _, e := range c.Tools {
		byName[e.Name] = e
	}
	for i, e := range c.Tools {
		if e.Probe == "" {
			continue
		}
		p, ok := byName[e.Probe]
		switch {
		case !ok:
			return fmt.Errorf("%w: tools[%d] %q: probe %q is not a tool of the catalog", ErrInvalid, i, e.Name, e.Probe)
		case e.Probe == e.Name:
			return fmt.Errorf("%w: tools[%d] %q: a tool cannot be its own probe", ErrInvalid, i, e.Name)
		case p.EffectContract().Effect != effect.ReadOnly:
			return fmt.Errorf("%w: tools[%d] %q: probe %q is not declared read_only", ErrInvalid, i, e.Name, e.Probe)
		}
	}
	return nil
}

// Contract returns the entry's contract: the declared one, or unknown at
// UnknownRevision.
func (e Entry) contract() (effect.Contract, error) {
	if e.Contract == nil {
		return effect.Contract{Effect: effect.Unknown, Revision: UnknownRevision}, nil
	}
	ef, err := effect.Parse(e.Contract.Effect)
	if err != nil {
		return effect.Contract{}, err
	}
	ct := effect.Contract{Effect: ef, Revision: e.Contract.Revision}
	return ct, ct.Validate()
}

// EffectContract returns the entry's host-owned contract (unknown at
// UnknownRevision when it declares none). The entry must be valid.
func (e Entry) EffectContract() effect.Contract {
	ct, _ := e.contract()
	return ct
}

func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err == nil && d <= 0 {
		err = errors.New("must be positive")
	}
	return d, err
}

// rule returns the approval rule of a.
func (a *Approval) rule() (*worker.ApprovalRule, error) {
	to, err := parseDuration(a.Timeout)
	if err != nil {
		return nil, fmt.Errorf("timeout: %w", err)
	}
	r := &worker.ApprovalRule{Timeout: to}
	if a.When == "" {
		return r, nil
	}
	field, limit, ok := strings.Cut(a.When, ">")
	field = strings.TrimSpace(field)
	n, perr := strconv.ParseFloat(strings.TrimSpace(limit), 64)
	if !ok || field == "" || perr != nil {
		return nil, fmt.Errorf("when %q: want FIELD>NUMBER", a.When)
	}
	r.When = worker.WhenAbove(field, n) // a missing or non-numeric field asks
	return r, nil
}
