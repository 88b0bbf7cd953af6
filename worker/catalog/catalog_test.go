package catalog_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jingwei/jingwei/effect"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/worker/catalog"
)

// compileCatalogSchema compiles schema/catalog.schema.json.
func compileCatalogSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	b, err := os.ReadFile("../../schema/catalog.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("catalog.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("catalog.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validateJSON(t *testing.T, s *jsonschema.Schema, c *catalog.Catalog) error {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return s.Validate(inst)
}

func TestExampleCatalogValidatesAgainstSchema(t *testing.T) {
	c, err := catalog.Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := validateJSON(t, compileCatalogSchema(t), c); err != nil {
		t.Fatalf("example catalog against catalog.schema.json: %v", err)
	}
	if len(c.Tools) != 5 || c.Servers["ledger"].Command != "./ledger-mcp" || c.Servers["search"].Headers["Authorization"] == "" {
		t.Fatalf("decoded %+v", c)
	}
	want := map[string]effect.Contract{
		"ledger.append":   {Effect: effect.Idempotent, Revision: "ledger-v1"},
		"ledger.transfer": {Effect: effect.NonIdempotent, Revision: "transfer-v1"},
		"search.query":    {Effect: effect.Unknown, Revision: catalog.UnknownRevision},
		"weather.get":     {Effect: effect.ReadOnly, Revision: "weather-v1"},
	}
	for _, e := range c.Tools {
		if w, ok := want[e.Name]; ok && e.EffectContract() != w {
			t.Errorf("%s: contract %v, want %v", e.Name, e.EffectContract(), w)
		}
	}
}

func TestCatalogRefusals(t *testing.T) {
	s := compileCatalogSchema(t)
	base := "version: 1\nservers:\n  s: {command: x}\ntools:\n"
	cases := []struct {
		name, yaml, want string
		schemaToo        bool // the JSON Schema refuses the decoded document as well
	}{
		{"unknown field with its line", base + "  - name: a\n    mcp: {server: s}\n    contrct: {effect: idempotent, revision: r}\n", "[7:5] unknown field \"contrct\"", false},
		{"two backends", base + "  - name: a\n    mcp: {server: s}\n    builtin: orders.create\n", "exactly one backend", true},
		{"no backend", base + "  - name: a\n", "exactly one backend", true},
		{"unknown server", base + "  - name: a\n    mcp: {server: nope}\n", "not in servers", false},
		{"bad effect", base + "  - name: a\n    mcp: {server: s}\n    contract: {effect: safe, revision: r}\n", "unknown effect", true},
		{"empty revision", base + "  - name: a\n    mcp: {server: s}\n    contract: {effect: idempotent, revision: \"\"}\n", "revision", true},
		{"duplicate name", base + "  - name: a\n    mcp: {server: s}\n  - name: a\n    mcp: {server: s}\n", "second tool", false},
		{"bad timeout", base + "  - name: a\n    mcp: {server: s}\n    timeout: soon\n", "timeout", true},
		{"bad approval", base + "  - name: a\n    mcp: {server: s}\n    approval: {when: amount}\n", "FIELD>NUMBER", true},
		{"wrong version", "version: 2\ntools: []\n", "version must be 1", true},
		{"probe not in catalog", base + "  - name: a\n    mcp: {server: s}\n    probe: nope\n", "not a tool of the catalog", false},
		{"probe not read_only", base + "  - name: a\n    mcp: {server: s}\n    probe: b\n  - name: b\n    mcp: {server: s}\n    contract: {effect: idempotent, revision: r}\n", "not declared read_only", false},
		{"probe of itself", base + "  - name: a\n    mcp: {server: s}\n    contract: {effect: read_only, revision: r}\n    probe: a\n", "its own probe", false},
		{"authoritative on a writer", base + "  - name: a\n    mcp: {server: s}\n    authoritative_not_found: true\n", "authoritative_not_found is for a probe", false},
		{"server with both", "version: 1\nservers:\n  s: {command: x, url: http://h}\ntools: []\n", "exactly one of command and url", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := catalog.Parse([]byte(tc.yaml))
			if !errors.Is(err, catalog.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want ErrInvalid with %q", err, tc.want)
			}
			if !tc.schemaToo {
				return
			}
			var doc any
			if err := yaml.Unmarshal([]byte(tc.yaml), &doc); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(doc)
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if s.Validate(inst) == nil {
				t.Errorf("catalog.schema.json accepts what Parse refuses: %s", b)
			}
		})
	}
}

// TestCatalogProbe: a tool may name a read_only tool of the catalog as its
// probe; the built tools carry it in their metadata, and the probe's
// authoritative_not_found.
func TestCatalogProbe(t *testing.T) {
	cat, err := catalog.Parse([]byte(`version: 1
tools:
  - name: pay
    http: {url: "http://127.0.0.1:1/pay"}
    contract: {effect: non_idempotent, revision: pay-v1}
    probe: pay.find
  - name: pay.find
    http: {url: "http://127.0.0.1:1/find"}
    contract: {effect: read_only, revision: find-v1}
    authoritative_not_found: true
`))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := catalog.Open(cat, zerolog.Nop()).Tools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]any{}
	for _, tl := range tools {
		got[tl.Metadata.Name] = [2]any{tl.Metadata.Probe, tl.Metadata.AuthoritativeNotFound}
	}
	if got["pay"] != [2]any{"pay.find", false} || got["pay.find"] != [2]any{"", true} {
		t.Fatalf("metadata %v", got)
	}
}
