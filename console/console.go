package console

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/service"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console is the review console: an http.Handler over the two role
// connections of its Config. Create it with New; serve it with Serve (or
// mount it with ServeHTTP and run Run for the live updates). Safe for
// concurrent use.
type Console struct {
	cfg      Config
	reviewer *service.Client
	host     *service.Client
	hostJS   jetstream.JetStream
	topo     *stream.Topology
	tmpl     *template.Template
	mux      *http.ServeMux
	secret   [32]byte
	token    string
	cop      *http.CrossOriginProtection

	live    *hub
	flashes *flashes

	// topoMu guards topo, looked up on first use (topology).
	topoMu sync.Mutex
}

// New checks cfg and returns a Console. It does not talk to NATS: the
// topology is looked up on the host connection at the first request that
// needs it, so a console started before the server answers its first
// pages once the server is there.
func New(cfg Config) (*Console, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("console: jetstream on the host connection: %w", err)
	}
	c := &Console{
		cfg:      cfg,
		reviewer: service.NewClient(cfg.Reviewer, service.ClientConfig{Prefix: cfg.Prefix, Timeout: cfg.Timeout}),
		host:     service.NewClient(cfg.Host, service.ClientConfig{Prefix: cfg.Prefix, Timeout: cfg.Timeout}),
		hostJS:   js,
		token:    cfg.Token,
		cop:      http.NewCrossOriginProtection(),
		live:     newHub(),
		flashes:  newFlashes(),
	}
	if _, err := rand.Read(c.secret[:]); err != nil {
		return nil, err
	}
	if c.token == "" {
		var b [24]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		c.token = base64.RawURLEncoding.EncodeToString(b[:])
	}
	c.tmpl, err = template.New("").Funcs(funcs).Funcs(template.FuncMap{
		"reviewerName": c.reviewerName,
		"approverName": c.approverName,
	}).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	c.routes()
	return c, nil
}

// Token returns the console's login secret (Config.Token, or the one New
// made): a browser logs in once at /login?token=<Token>.
func (c *Console) Token() string { return c.token }

// LoginPath returns the path and query a browser opens to log in:
// /login?token=<Token>.
func (c *Console) LoginPath() string { return "/login?token=" + url.QueryEscape(c.token) }

// topology returns the topology, looked up on the host connection once.
func (c *Console) topology(ctx context.Context) (*stream.Topology, error) {
	c.topoMu.Lock()
	defer c.topoMu.Unlock()
	if c.topo != nil {
		return c.topo, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	t, err := stream.OpenTopology(ctx, c.hostJS, stream.TopologyConfig{Prefix: c.cfg.Prefix})
	if err != nil {
		return nil, fmt.Errorf("jingwei's topology (prefix %s) on the host connection: %w", c.cfg.Prefix, err)
	}
	c.topo = t
	return t, nil
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /login", c.handleLogin)
	m.HandleFunc("GET /{$}", c.handleAwaiting)
	m.HandleFunc("GET /call", c.handleCall)
	m.HandleFunc("GET /sessions", c.handleSessions)
	m.HandleFunc("GET /session", c.handleSession)
	m.HandleFunc("GET /plans", c.handlePlans)
	m.HandleFunc("GET /stopped", c.handleStopped)
	m.HandleFunc("GET /live", c.handleLive)
	m.HandleFunc("POST /decide", c.handleDecide)
	m.HandleFunc("POST /prepare", c.handlePrepare)
	sub, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(sub)))
	c.mux = m
}

// csp is the Content-Security-Policy of every response: the console's own
// script and style only, no inline script or style, no frames, forms that
// post only to the console.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// ServeHTTP answers one request: it refuses a Host the console does not
// answer to (421) and a request without the login cookie (401; /login
// excepted, which sets it), sets the security headers and routes the
// request.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if !c.cfg.hostAllowed(r.Host) {
		http.Error(w, fmt.Sprintf("%v: the console does not answer to host %q", ErrForbidden, r.Host), http.StatusMisdirectedRequest)
		return
	}
	if r.URL.Path != "/login" && c.loginID(r) == "" {
		http.Error(w, fmt.Sprintf("%v: open the login URL the console printed at start (…/login?token=…)", ErrUnauthorized), http.StatusUnauthorized)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// Run looks for changes every Config.PollInterval (the recovery worker's
// status, the last sequences of the session logs and the reviews) and
// tells the open pages (/live) when something changed, until ctx is done.
// It returns nil then. Serve runs it.
func (c *Console) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.PollInterval)
	defer t.Stop()
	var last string
	failing := false
	for {
		fp, err := c.fingerprint(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				c.cfg.Logger.Warn().Err(err).Msg("console: cannot poll for changes")
			}
			failing = true
		case err == nil:
			if failing {
				c.cfg.Logger.Info().Msg("console: polling again")
			}
			failing = false
			if fp != last {
				last = fp
				c.live.notify()
			}
		}
		select {
		case <-ctx.Done():
			c.live.close()
			return nil
		case <-t.C:
		}
	}
}

// Serve serves the console on ln until ctx is done, then shuts the server
// down (open /live streams are ended) and returns nil; it returns the
// server's error if it stops on its own.
func (c *Console) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           c,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    32 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan struct{})
	go func() { defer close(ran); _ = c.Run(rctx) }()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		cancel()
		<-ran
		return err
	case <-ctx.Done():
	}
	cancel()
	<-ran
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
