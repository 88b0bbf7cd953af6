package console

import (
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

func testKey(t *testing.T) nkeys.KeyPair {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func TestNewValidates(t *testing.T) {
	_, nc, _ := streamtest.Start(t)
	acct, _ := nkeys.CreateAccount()
	for name, cfg := range map[string]Config{
		"no reviewer":  {Host: nc, Key: testKey(t)},
		"no host":      {Reviewer: nc, Key: testKey(t)},
		"no key":       {Reviewer: nc, Host: nc},
		"account key":  {Reviewer: nc, Host: nc, Key: acct},
		"bad prefix":   {Reviewer: nc, Host: nc, Key: testKey(t), Prefix: "a.b"},
		"empty host 2": {Reviewer: nc, Host: nc, Key: testKey(t), AllowedHosts: []string{" "}},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestHostAllowed(t *testing.T) {
	loop := Config{}
	for host, want := range map[string]bool{
		"127.0.0.1:8470": true, "localhost:8470": true, "[::1]:8470": true, "127.9.9.9": true,
		"evil.example:8470": false, "10.0.0.1:8470": false, "": false, "localhost.evil.example": false,
	} {
		if got := loop.hostAllowed(host); got != want {
			t.Errorf("loopback console, Host %q: %v, want %v", host, got, want)
		}
	}
	named := Config{AllowedHosts: []string{"review.internal"}}
	if !named.hostAllowed("review.internal:8470") || named.hostAllowed("127.0.0.1:8470") {
		t.Error("AllowedHosts is not the list of names the console answers to")
	}
	if !(Config{AllowedHosts: []string{"*"}}).hostAllowed("anything:1") {
		t.Error(`"*" does not answer to every host`)
	}
}

func TestPrettyKeepsTextAndIsEscapedByThePage(t *testing.T) {
	got := pretty([]byte(`{"a":"<b>&","n":12345678901234567890}`))
	if !strings.Contains(got, `"<b>&"`) || !strings.Contains(got, "12345678901234567890") {
		t.Fatalf("pretty = %s, want the text as sent and the number exact", got)
	}
	if pretty([]byte("not json")) != "not json" {
		t.Fatal("pretty changes what is not JSON")
	}
}

func TestWhy(t *testing.T) {
	a := schema.Assessment{Outcome: schema.OutcomeUncertain, Decision: schema.DecisionNeedsReview, Evidence: "no_result"}
	if s := why(a); !strings.Contains(s, "not_executed allows one retry") || !strings.Contains(s, "fenced") {
		t.Fatalf("why(needs_review, no_result) = %q", s)
	}
}

// TestHandlers runs the console's handlers against an embedded server
// (without a recovery worker): the security headers on every page, the
// static assets, the Host guard, and the refusal of POSTs that did not
// come from the console's page.
func TestHandlers(t *testing.T) {
	_, nc, _ := streamtest.Start(t)
	c, err := New(Config{Reviewer: nc, Host: nc, Key: testKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := cl.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "No recovery worker answers") {
		t.Fatalf("GET / without a recovery worker: %d, want 200 saying no recovery worker answers:\n%s", resp.StatusCode, body)
	}
	for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options"} {
		if resp.Header.Get(h) == "" {
			t.Errorf("GET / has no %s", h)
		}
	}
	if regexp.MustCompile(`<script>`).MatchString(body) {
		t.Error("the page has an inline script")
	}
	if resp, js := get("/static/console.js"); resp.StatusCode != http.StatusOK || !strings.Contains(js, "EventSource") || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") {
		t.Errorf("console.js: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp, _ := get("/call?session=a.b&call=c"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad session id: %d, want 400", resp.StatusCode)
	}
	if resp, _ := get("/nosuch"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/nosuch: %d, want 404", resp.StatusCode)
	}

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	req.Host = "evil.example"
	if resp, err := cl.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("foreign Host: %v %v, want 421", resp, err)
	}

	u, _ := url.Parse(srv.URL)
	token := c.csrfToken(jar.Cookies(u)[0].Value)
	post := func(form url.Values, site string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/decide", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if site != "" {
			req.Header.Set("Sec-Fetch-Site", site)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ok := url.Values{"csrf": {token}, "kind": {"review"}, "session": {"s-1"}, "call": {"c-1"}, "choice": {"bogus"}, "operator": {"a"}, "evidence": {"e"}}
	if code := post(url.Values{"kind": {"review"}}, "same-origin"); code != http.StatusForbidden {
		t.Errorf("no token: %d, want 403", code)
	}
	if code := post(ok, "cross-site"); code != http.StatusForbidden {
		t.Errorf("cross-site: %d, want 403", code)
	}
	if code := post(url.Values{"csrf": {token}, "evidence": {strings.Repeat("x", MaxFormBytes)}}, "same-origin"); code != http.StatusForbidden {
		t.Errorf("oversized body: %d, want 403", code)
	}
	if code := post(ok, "same-origin"); code != http.StatusSeeOther {
		t.Errorf("the console's own form: %d, want 303 to the call's page", code)
	}
}
