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
	for name, cfg := range map[string]Config{
		"no reviewer":  {Host: nc},
		"no host":      {Reviewer: nc},
		"bad prefix":   {Reviewer: nc, Host: nc, Prefix: "a.b"},
		"empty host 2": {Reviewer: nc, Host: nc, AllowedHosts: []string{" "}},
		"short token":  {Reviewer: nc, Host: nc, Token: "short"},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
	c, err := New(Config{Reviewer: nc, Host: nc})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Token()) < MinTokenBytes || !strings.Contains(c.LoginPath(), c.Token()) {
		t.Fatalf("made token %q, login path %q", c.Token(), c.LoginPath())
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
// (without a recovery worker): every page but /login answers 401 without
// the login cookie, a wrong token logs no one in; with it, the security
// headers on every page, the static assets, the Host guard, and the
// refusal of POSTs that did not come from the console's page, including
// one that carries neither Origin nor Sec-Fetch-Site (a script, not the
// page).
func TestHandlers(t *testing.T) {
	_, nc, _ := streamtest.Start(t)
	c, err := New(Config{Reviewer: nc, Host: nc, Token: "a-test-token-of-some-length"})
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
	for _, path := range []string{"/", "/call?session=s-1&call=c-1", "/sessions", "/plans", "/stopped", "/live", "/static/console.js", "/login", "/login?token=wrong-token-of-some-length", "/nosuch"} {
		if resp, body := get(path); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "csrf") {
			t.Errorf("GET %s without a login: %d, want 401 and no page", path, resp.StatusCode)
		}
	}
	// A forged cookie (a valid-looking id, a MAC under another secret).
	u, _ := url.Parse(srv.URL)
	jar.SetCookies(u, []*http.Cookie{{Name: loginCookie, Value: randomID() + ".AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}})
	if resp, _ := get("/"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a forged login cookie: %d, want 401", resp.StatusCode)
	}
	if resp, _ := get(c.LoginPath()); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d to %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
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
	if resp, js := get("/static/sign.js"); resp.StatusCode != http.StatusOK || !strings.Contains(js, "Ed25519") {
		t.Errorf("sign.js: %d", resp.StatusCode)
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

	id, _, _ := strings.Cut(jar.Cookies(u)[0].Value, ".")
	token := []string{"", c.csrfToken(id)}
	post := func(form url.Values, hdr map[string]string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/decide", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	same := map[string]string{"Sec-Fetch-Site": "same-origin"}
	ok := url.Values{"csrf": {token[1]}, "kind": {"review"}, "session": {"s-1"}, "call": {"c-1"}, "signed": {"{}"}}
	if code := post(url.Values{"kind": {"review"}}, same); code != http.StatusForbidden {
		t.Errorf("no token: %d, want 403", code)
	}
	if code := post(ok, map[string]string{"Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden {
		t.Errorf("cross-site: %d, want 403", code)
	}
	if code := post(ok, map[string]string{"Sec-Fetch-Site": "none"}); code != http.StatusForbidden {
		t.Errorf("Sec-Fetch-Site none: %d, want 403", code)
	}
	if code := post(ok, nil); code != http.StatusForbidden {
		t.Errorf("neither Origin nor Sec-Fetch-Site (curl): %d, want 403", code)
	}
	if code := post(ok, map[string]string{"Origin": "http://evil.example"}); code != http.StatusForbidden {
		t.Errorf("a foreign Origin: %d, want 403", code)
	}
	if code := post(url.Values{"csrf": {token[1]}, "evidence": {strings.Repeat("x", MaxFormBytes)}}, same); code != http.StatusForbidden {
		t.Errorf("oversized body: %d, want 403", code)
	}
	if code := post(ok, same); code != http.StatusSeeOther {
		t.Errorf("the console's own form, by Sec-Fetch-Site: %d, want 303 to the call's page", code)
	}
	if code := post(ok, map[string]string{"Origin": srv.URL}); code != http.StatusSeeOther {
		t.Errorf("the console's own form, by Origin: %d, want 303 to the call's page", code)
	}
	// Another login's cookie does not carry this login's token.
	jar2, _ := cookiejar.New(nil)
	cl2 := &http.Client{Jar: jar2, CheckRedirect: cl.CheckRedirect}
	if r, err := cl2.Get(srv.URL + c.LoginPath()); err != nil || r.StatusCode != http.StatusSeeOther {
		t.Fatalf("second login: %v %v", r, err)
	}
	cl = cl2
	if code := post(ok, same); code != http.StatusForbidden {
		t.Errorf("another login with this login's token: %d, want 403", code)
	}
}
