// Package schematest compiles jingwei's JSON Schema files for tests that
// check messages against them (the schemas and the service, the CLI or a
// codec agreeing on the same documents).
package schematest

import (
	"bytes"
	"io/fs"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jingwei/jingwei/schema"
)

var (
	once     sync.Once
	compiled map[string]*jsonschema.Schema
	err      error
)

// Schemas compiles every embedded schema file (schema.SchemaFiles,
// formats asserted) once per test binary and returns them by file name
// ("request.schema.json"); a file that does not compile fails tb.
func Schemas(tb testing.TB) map[string]*jsonschema.Schema {
	tb.Helper()
	once.Do(func() { compiled, err = compile() })
	if err != nil {
		tb.Fatalf("compiling the schema files: %v", err)
	}
	return compiled
}

func compile() (map[string]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	for _, name := range schema.SchemaFiles {
		b, err := fs.ReadFile(schema.Files(), name)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		if err := c.AddResource(schema.SchemaBaseURL+name, doc); err != nil {
			return nil, err
		}
	}
	out := map[string]*jsonschema.Schema{}
	for _, name := range schema.SchemaFiles {
		s, err := c.Compile(schema.SchemaBaseURL + name)
		if err != nil {
			return nil, err
		}
		out[name] = s
	}
	return out, nil
}
