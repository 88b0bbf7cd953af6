package natsnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"
)

// SyncMode says when the embedded server's file store fsyncs.
type SyncMode string

const (
	// SyncAlways fsyncs every write before acknowledging it: an
	// acknowledged event survives a crash of the machine. The default.
	SyncAlways SyncMode = "always"
	// SyncInterval fsyncs on the server's interval (2 minutes): much
	// faster, but a machine crash can lose acknowledged events. See the
	// package documentation for the trade-off.
	SyncInterval SyncMode = "interval"
)

// DefaultDataDir is the embedded server's default store directory.
const DefaultDataDir = ".jingwei/data"

// DefaultListen is the embedded server's default client address.
const DefaultListen = "127.0.0.1:4222"

// EmbeddedConfig configures StartEmbedded. The zero value is usable.
type EmbeddedConfig struct {
	// Dir is the JetStream store directory. Defaults to ./.jingwei/data.
	Dir string
	// Listen is the client address, host:port. Port -1 picks a free port
	// ("127.0.0.1:-1", what tests use). Defaults to 127.0.0.1:4222.
	Listen string
	// Sync is the durability mode. Defaults to SyncAlways.
	Sync SyncMode
	// Name is the server name. Defaults to "jingwei".
	Name string
	// ReadyTimeout bounds the wait for the server to accept clients.
	// Defaults to 10 s.
	ReadyTimeout time.Duration
	// Logger receives the server's log (notices at info, debug and trace
	// dropped). Defaults to zerolog.Nop().
	Logger zerolog.Logger
	// Auth, when non-nil and its AccountsBlock is not empty, turns
	// authorization on: the server runs with that accounts block (the same
	// text an external server is given). access.Users gives the roles'
	// accounts: the trusted account (worker, recoverer, admin) with
	// JetStream and its exports, one account per untrusted role (agent,
	// reviewer, host) importing what the role uses, and each role's nkey
	// user with the role's permissions. Clients then must connect with a
	// role's seed (ConnectConfig.NKeySeedFile, NkeyOption). Nil keeps the
	// server open to every client with full access, in one account.
	Auth Authorization
	// Options, when non-nil, is called with the server options just before
	// the server is created (after Users set up the accounts), for
	// settings this config does not offer (TLS, clustering). Nil changes
	// nothing.
	Options func(*server.Options)
}

// WithDefaults returns c with zero fields set to their defaults.
func (c EmbeddedConfig) WithDefaults() EmbeddedConfig {
	if c.Dir == "" {
		c.Dir = DefaultDataDir
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Sync == "" {
		c.Sync = SyncAlways
	}
	if c.Name == "" {
		c.Name = "jingwei"
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = 10 * time.Second
	}
	return c
}

func (c EmbeddedConfig) validate() (host string, port int, err error) {
	if c.Sync != SyncAlways && c.Sync != SyncInterval {
		return "", 0, fmt.Errorf("stream: EmbeddedConfig.Sync %q: want %q or %q", c.Sync, SyncAlways, SyncInterval)
	}
	if err := validateAuth(c.Auth); err != nil {
		return "", 0, err
	}
	h, p, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return "", 0, fmt.Errorf("stream: EmbeddedConfig.Listen %q: %w", c.Listen, err)
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("stream: EmbeddedConfig.Listen %q: bad port", c.Listen)
	}
	return h, port, nil
}

// CheckListen reports ErrAddressInUse when the TCP address addr
// (host:port) cannot be listened on because something already does, and
// nil when it is free or names no fixed port (port 0 or -1). nats-server
// itself only logs a failed listen and never becomes ready, so without this
// check a second server on a taken port would wait out its ReadyTimeout.
func CheckListen(addr string) error {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("stream: listen address %q: %w", addr, err)
	}
	if port, err := strconv.Atoi(p); err != nil || port <= 0 {
		return nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, p))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%w: %s (is another jingwei serve or nats-server running? stop it, or pick another --listen)", ErrAddressInUse, addr)
		}
		return fmt.Errorf("stream: listen on %s: %w", addr, err)
	}
	return l.Close()
}

// Embedded is an in-process nats-server with JetStream and a file store.
// Safe for concurrent use.
type Embedded struct {
	srv  *server.Server
	cfg  EmbeddedConfig
	once sync.Once
}

// StartEmbedded starts a nats-server with JetStream in this process and
// waits until it accepts clients. The caller must call Shutdown.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	cfg = cfg.WithDefaults()
	host, port, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if err := CheckListen(cfg.Listen); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("stream: data dir: %w", err)
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		SyncAlways: cfg.Sync == SyncAlways,
	}
	block := ""
	if cfg.Auth != nil {
		var err error
		if block, err = cfg.Auth.AccountsBlock(); err != nil {
			return nil, err
		}
	}
	if block != "" {
		if err := opts.ProcessConfigString(block); err != nil {
			return nil, fmt.Errorf("stream: embedded server accounts: %w", err)
		}
	}
	if cfg.Options != nil {
		cfg.Options(opts)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("stream: embedded server: %w", err)
	}
	srv.SetLogger(serverLogger{cfg.Logger}, false, false)
	go srv.Start()
	ready := make(chan bool, 1)
	go func() { ready <- srv.ReadyForConnections(cfg.ReadyTimeout) }()
	select {
	case ok := <-ready:
		if !ok {
			srv.Shutdown()
			return nil, fmt.Errorf("stream: embedded server not ready within %s (is %s in use?)", cfg.ReadyTimeout, cfg.Listen)
		}
	case <-ctx.Done():
		srv.Shutdown()
		return nil, ctx.Err()
	}
	cfg.Logger.Info().Str("url", srv.ClientURL()).Str("dir", dir).Str("sync", string(cfg.Sync)).Bool("authorization", block != "").Msg("embedded nats-server ready")
	return &Embedded{srv: srv, cfg: cfg}, nil
}

// ClientURL returns the nats:// URL clients connect to.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Server returns the underlying nats-server, for tests and advanced use.
func (e *Embedded) Server() *server.Server { return e.srv }

// Connect opens a TCP client connection to the embedded server. Options are
// passed to nats.Connect after jingwei's defaults (reconnect forever).
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.Name(e.cfg.Name), nats.MaxReconnects(-1)}, opts...)
	nc, err := nats.Connect(e.srv.ClientURL(), all...)
	if err != nil {
		return nil, fmt.Errorf("stream: connect to embedded server: %w", err)
	}
	return nc, nil
}

// ConnectInProcess opens a connection that does not go through TCP (nats
// InProcessServer): a little faster, but it can only ever reconnect to this
// server, so use Connect where failover matters.
func (e *Embedded) ConnectInProcess(opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.Name(e.cfg.Name), nats.InProcessServer(e.srv)}, opts...)
	nc, err := nats.Connect("", all...)
	if err != nil {
		return nil, fmt.Errorf("stream: in-process connection: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server and waits until it has stopped and flushed its
// store. Safe to call more than once.
func (e *Embedded) Shutdown() {
	e.once.Do(func() {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	})
}

// serverLogger feeds nats-server's log into zerolog.
type serverLogger struct{ l zerolog.Logger }

func (s serverLogger) Noticef(f string, v ...any) { s.l.Info().Msgf(f, v...) }
func (s serverLogger) Warnf(f string, v ...any)   { s.l.Warn().Msgf(f, v...) }
func (s serverLogger) Fatalf(f string, v ...any)  { s.l.Error().Msgf(f, v...) }
func (s serverLogger) Errorf(f string, v ...any)  { s.l.Error().Msgf(f, v...) }
func (s serverLogger) Debugf(string, ...any)      {}
func (s serverLogger) Tracef(string, ...any)      {}

// DefaultURL is the server URL used when none is given and $NATS_URL is
// unset.
const DefaultURL = "nats://127.0.0.1:4222"

// ConnectConfig configures Connect to an external (or embedded) server.
type ConnectConfig struct {
	// URL is the server URL; several may be joined by commas. Defaults to
	// DefaultURL.
	URL string
	// Creds is a credentials file (JWT + nkey seed). Empty: none.
	Creds string
	// NKeySeedFile is an nkey seed file for nkey authentication. Empty:
	// none.
	NKeySeedFile string
	// TLSCA is a PEM file of CAs to verify the server with; setting it
	// requires TLS. Empty: system roots, TLS only if the URL asks for it.
	TLSCA string
	// Name is the connection name the server shows. Defaults to "jingwei".
	Name string
	// ConnectTimeout bounds the first connection, retried with backoff.
	// Defaults to 5 s. Once connected, the client reconnects forever.
	ConnectTimeout time.Duration
	// Logger receives disconnect/reconnect events. Defaults to zerolog.Nop().
	Logger zerolog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c ConnectConfig) WithDefaults() ConnectConfig {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.Name == "" {
		c.Name = "jingwei"
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	return c
}

// reconnectDelay returns a nats reconnect-delay handler backed by an
// exponential backoff (50 ms growing to 5 s, jittered), reset on every new
// disconnect.
func reconnectDelay() nats.ReconnectDelayHandler {
	var mu sync.Mutex
	b := Backoff(50*time.Millisecond, 5*time.Second)
	return func(attempts int) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if attempts <= 1 {
			b.Reset()
		}
		return b.NextBackOff()
	}
}

// Backoff returns an exponential backoff from initial to max that never
// gives up (the caller's context bounds it), reset and ready to use.
func Backoff(initial, max time.Duration) *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = initial
	b.MaxInterval = max
	b.MaxElapsedTime = 0
	b.Reset()
	return b
}

// Connect connects to a NATS server with credentials, nkey or TLS CA as
// configured, retrying the first connection with backoff until
// ConnectTimeout, and reconnecting forever afterwards. It returns
// ErrServerTooOld (naming the version) for a server older than 2.11.
func Connect(ctx context.Context, cfg ConnectConfig) (*nats.Conn, error) {
	cfg = cfg.WithDefaults()
	log := cfg.Logger
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		// One dial may not outlast the whole first-connection budget.
		nats.Timeout(min(cfg.ConnectTimeout, 2*time.Second)),
		nats.CustomReconnectDelay(reconnectDelay()),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("nats disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats reconnected")
		}),
	}
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
	if cfg.NKeySeedFile != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("stream: nkey seed %s: %w", cfg.NKeySeedFile, err)
		}
		opts = append(opts, o)
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	var nc *nats.Conn
	err := backoff.Retry(func() error {
		var err error
		nc, err = nats.Connect(cfg.URL, opts...)
		if err != nil && (errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || strings.Contains(err.Error(), "no such file")) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(Backoff(50*time.Millisecond, time.Second), ctx))
	if err != nil {
		return nil, fmt.Errorf("stream: connect to %s: %w", cfg.URL, err)
	}
	if err := checkVersion(nc.ConnectedServerVersion()); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// checkVersion returns ErrServerTooOld unless v is 2.11 or newer.
func checkVersion(v string) error {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) >= 2 {
		major, err1 := strconv.Atoi(parts[0])
		minor, err2 := strconv.Atoi(parts[1])
		if err1 == nil && err2 == nil && (major > 2 || major == 2 && minor >= 11) {
			return nil
		}
	}
	return fmt.Errorf("%w: server reports version %q", ErrServerTooOld, v)
}

// Authorization gives the embedded server its accounts and users
// (access.Users implements it). Stream does not know the roles: the
// permission model is package access's.
type Authorization interface {
	// Validate checks the accounts' settings; StartEmbedded calls it before
	// anything is started.
	Validate() error
	// AccountsBlock returns the server configuration's accounts block, or
	// "" for a server without authorization.
	AccountsBlock() (string, error)
}

func validateAuth(a Authorization) error {
	if a == nil {
		return nil
	}
	return a.Validate()
}

// NkeyOption returns the nats.Option that authenticates a connection with
// the nkey user key pair kp (a role's key, KeyDir.KeyPair). The key pair
// must stay usable while the connection lives: it signs the server's nonce
// on every reconnect.
func NkeyOption(kp nkeys.KeyPair) nats.Option {
	pub, _ := kp.PublicKey()
	return nats.Nkey(pub, kp.Sign)
}
