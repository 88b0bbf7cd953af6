// Package httptool runs an HTTP endpoint as a jingwei tool body.
//
// Every request carries Idempotency-Key: <task>/<key> (the operation key,
// stable across retries, so an API that honours the header runs a retry
// once) and the fencing token in Jw-Fence-Session, Jw-Fence-Epoch and
// Jw-Fence-Call. The status code decides no more than the decision table
// lets it: 2xx → ok, the body the output (as it is when it is JSON, else a
// JSON string); any other status → failed (not retryable: a 500 does not
// prove the request had no effect); a transport error → failed, not
// retryable (sent and unanswered: the outcome is unknown); the body's
// context ending (the tool's timeout) → its error, recorded as timeout.
package httptool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/jingwei/jingwei/worker"
)

// Header names of the fencing token.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderFenceSession   = "Jw-Fence-Session"
	HeaderFenceEpoch     = "Jw-Fence-Epoch"
	HeaderFenceCall      = "Jw-Fence-Call"
)

// MaxResponseBytes bounds the body read from a response.
const MaxResponseBytes = 4 << 20

// Endpoint is an HTTP endpoint.
type Endpoint struct {
	// Method defaults to POST.
	Method string
	// URL may hold {field} placeholders, replaced by the path-escaped
	// top-level argument of that name (a string as it is, another value as
	// its JSON).
	URL string
	// Headers go with every request.
	Headers map[string]string
	// NoBody sends no body; otherwise the arguments are the JSON body.
	NoBody bool
	// Client defaults to http.DefaultClient.
	Client *http.Client
}

var placeholder = regexp.MustCompile(`\{([A-Za-z0-9_\-]+)\}`)

// Expand fills the placeholders of tmpl from args.
func Expand(tmpl string, args json.RawMessage) (string, error) {
	var m map[string]json.RawMessage
	if strings.Contains(tmpl, "{") {
		if err := json.Unmarshal(args, &m); err != nil {
			return "", fmt.Errorf("url template needs object arguments: %w", err)
		}
	}
	var missing string
	out := placeholder.ReplaceAllStringFunc(tmpl, func(p string) string {
		name := p[1 : len(p)-1]
		v, ok := m[name]
		if !ok {
			missing = name
			return ""
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		return url.PathEscape(s)
	})
	if missing != "" {
		return "", fmt.Errorf("url template: no argument %q", missing)
	}
	return out, nil
}

// Body returns the body that calls e.
func (e Endpoint) Body() worker.Body {
	method := e.Method
	if method == "" {
		method = http.MethodPost
	}
	client := e.Client
	if client == nil {
		client = http.DefaultClient
	}
	return func(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
		u, err := Expand(e.URL, req.Arguments)
		if err != nil {
			return nil, err // nothing sent
		}
		var body io.Reader
		if !e.NoBody {
			body = bytes.NewReader(req.Arguments)
		}
		hr, err := http.NewRequestWithContext(ctx, method, u, body)
		if err != nil {
			return nil, err
		}
		for k, v := range e.Headers {
			hr.Header.Set(k, v)
		}
		if !e.NoBody {
			hr.Header.Set("Content-Type", "application/json")
		}
		hr.Header.Set("Accept", "application/json")
		hr.Header.Set(HeaderIdempotencyKey, req.Operation.Task+"/"+req.Operation.Key)
		hr.Header.Set(HeaderFenceSession, req.Fence.Session)
		hr.Header.Set(HeaderFenceEpoch, strconv.FormatUint(req.Fence.Epoch, 10))
		hr.Header.Set(HeaderFenceCall, req.Fence.CallID)
		resp, err := client.Do(hr)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%s %s: no response: %w", method, hr.URL.Redacted(), err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%s %s: %s, body unread: %w", method, hr.URL.Redacted(), resp.Status, err)
		}
		if len(b) > MaxResponseBytes {
			return nil, fmt.Errorf("%s %s: %s, body over %d bytes", method, hr.URL.Redacted(), resp.Status, MaxResponseBytes)
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return nil, fmt.Errorf("%s %s: %s: %s", method, hr.URL.Redacted(), resp.Status, truncate(b, 512))
		}
		if len(bytes.TrimSpace(b)) == 0 {
			return nil, nil
		}
		if json.Valid(b) {
			return b, nil
		}
		return json.Marshal(string(b))
	}
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
