package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"sync"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker/service"
)

// cookieName is the console's browser cookie: a random id the CSRF token
// is bound to (HttpOnly, SameSite=Strict).
const cookieName = "jw_console"

// maxFlashes bounds the outcomes kept for the pages a POST redirects to.
const maxFlashes = 256

// browserID returns the request's console cookie, setting a new one on
// the response when there is none (or it is malformed).
func (c *Console) browserID(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(cookieName); err == nil && validID(ck.Value) {
		return ck.Value
	}
	id := randomID()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return id
}

// csrfToken is the token a form of the browser with id carries: an HMAC
// of the id under the console's secret, which no other page can compute.
func (c *Console) csrfToken(id string) string {
	m := hmac.New(sha256.New, c.secret[:])
	m.Write([]byte("csrf:" + id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkPost refuses a state-changing request that did not come from the
// console's own page: cross-origin (Sec-Fetch-Site, Origin), without the
// console cookie, or without its CSRF token. It bounds the body to
// MaxFormBytes and parses the form. It returns the browser id.
func (c *Console) checkPost(w http.ResponseWriter, r *http.Request) (string, error) {
	if err := c.cop.Check(r); err != nil {
		return "", fmt.Errorf("%w: %v", ErrForbidden, err)
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
	if err := r.ParseForm(); err != nil {
		return "", fmt.Errorf("%w: unreadable form (at most %d bytes): %v", ErrForbidden, MaxFormBytes, err)
	}
	ck, err := r.Cookie(cookieName)
	if err != nil || !validID(ck.Value) {
		return "", fmt.Errorf("%w: no console cookie (open the console's page first)", ErrForbidden)
	}
	tok := r.PostFormValue("csrf")
	if !hmac.Equal([]byte(tok), []byte(c.csrfToken(ck.Value))) {
		return "", fmt.Errorf("%w: missing or wrong CSRF token (reload the console's page)", ErrForbidden)
	}
	return ck.Value, nil
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
