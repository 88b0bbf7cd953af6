package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker/service"
)

// loginCookie is the console's login cookie: a random id and its MAC
// under the console's secret (HttpOnly, SameSite=Strict), set by /login.
// The CSRF token of a page is bound to the id.
const loginCookie = "jw_console_login"

// maxFlashes bounds the outcomes kept for the pages a POST redirects to.
const maxFlashes = 256

// mac is the console's HMAC of s under its secret, base64url.
func (c *Console) mac(s string) string {
	m := hmac.New(sha256.New, c.secret[:])
	m.Write([]byte(s))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// handleLogin answers GET /login?token=T: with the console's token it sets
// the login cookie and redirects (303) to the front page; with another
// token, or none, it answers 401.
func (c *Console) handleLogin(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("token")
	if !hmac.Equal([]byte(tok), []byte(c.token)) {
		c.cfg.Logger.Warn().Str("remote", r.RemoteAddr).Msg("console: login with a wrong token")
		http.Error(w, fmt.Sprintf("%v: wrong or missing token: open the login URL the console printed at start (…/login?token=…)", ErrUnauthorized), http.StatusUnauthorized)
		return
	}
	id := randomID()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: id + "." + c.mac("login:"+id), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// loginID returns the id of the request's login cookie, or "" when it has
// none or its MAC is not the console's.
func (c *Console) loginID(r *http.Request) string {
	ck, err := r.Cookie(loginCookie)
	if err != nil {
		return ""
	}
	id, sum, ok := strings.Cut(ck.Value, ".")
	if !ok || !validID(id) || !hmac.Equal([]byte(sum), []byte(c.mac("login:"+id))) {
		return ""
	}
	return id
}

// csrfToken is the token a form of the login with id carries: an HMAC of
// the id under the console's secret, which no other page can compute.
func (c *Console) csrfToken(id string) string { return c.mac("csrf:" + id) }

// checkPost refuses a state-changing request that did not come from the
// console's own page in a logged-in browser: without the login cookie,
// cross-origin by Sec-Fetch-Site or Origin (net/http's
// CrossOriginProtection), without either header (a browser sends them on
// every POST; their absence is a script, not the page), or without the
// CSRF token bound to the login. It bounds the body to MaxFormBytes and
// parses the form. It returns the login id.
func (c *Console) checkPost(w http.ResponseWriter, r *http.Request) (string, error) {
	id := c.loginID(r)
	if id == "" {
		return "", fmt.Errorf("%w: no login (open the login URL the console printed at start)", ErrUnauthorized)
	}
	if err := c.cop.Check(r); err != nil {
		return "", fmt.Errorf("%w: %v", ErrForbidden, err)
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); {
	case site == "" && r.Header.Get("Origin") == "":
		return "", fmt.Errorf("%w: no Origin and no Sec-Fetch-Site: a POST must come from the console's page in a browser", ErrForbidden)
	case site != "" && site != "same-origin":
		return "", fmt.Errorf("%w: Sec-Fetch-Site %q: a POST must come from the console's own page", ErrForbidden, site)
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
	if err := r.ParseForm(); err != nil {
		return "", fmt.Errorf("%w: unreadable form (at most %d bytes): %v", ErrForbidden, MaxFormBytes, err)
	}
	tok := r.PostFormValue("csrf")
	if !hmac.Equal([]byte(tok), []byte(c.csrfToken(id))) {
		return "", fmt.Errorf("%w: missing or wrong CSRF token (reload the console's page)", ErrForbidden)
	}
	return id, nil
}

// postStatus is the status a refused POST is answered with: 401 without a
// login, else 403.
func postStatus(err error) int {
	if errors.Is(err, ErrUnauthorized) {
		return http.StatusUnauthorized
	}
	return http.StatusForbidden
}

func randomID() string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// validID reports whether s looks like a randomID.
func validID(s string) bool {
	if len(s) != 24 {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil
}

// flash is the outcome of a POST, shown once on the page it redirects to.
type flash struct {
	browser string
	// Kind is "review" or "prepare".
	Kind string
	OK   bool
	// Title is the outcome in a few words; Code and Message the refusal's
	// code and message; Hint what to do next.
	Title, Code, Message, Hint string
	// Check is how the recovery worker judged a published review.
	Check *service.ReviewCheck
	// Plan is the plan prepare issued.
	Plan *schema.Plan
}

// flashes keeps the latest outcomes by id, bounded (the oldest go).
type flashes struct {
	mu    sync.Mutex
	byID  map[string]flash
	order []string
}

func newFlashes() *flashes { return &flashes{byID: map[string]flash{}} }

func (f *flashes) put(fl flash) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := randomID()
	f.byID[id] = fl
	f.order = append(f.order, id)
	if len(f.order) > maxFlashes {
		delete(f.byID, f.order[0])
		f.order = f.order[1:]
	}
	return id
}

// get returns the outcome id for the browser that made it (another
// browser's id shows nothing).
func (f *flashes) get(id, browser string) (flash, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl, ok := f.byID[id]
	if !ok || fl.browser != browser {
		return flash{}, false
	}
	return fl, true
}
