package natsnode

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// A client whose server is cut off from the rest of its cluster (a
// partition, a node that rejoined badly) keeps its TCP connection: nats.go
// sees nothing wrong and never moves, while every JetStream call on it is
// answered 503 "JetStream cluster not available" (10008), "no responders",
// or nothing at all — for as long as the cut lasts. The quorum watch asks
// the server for JetStream's account info (answered only by the meta
// leader, or with 503 by a server that knows it has none) and, when no
// answer has come for longer than the longest raft election while the
// connection is up, forces a reconnect to another server of the pool.

// DefaultQuorumAfter is how long JetStream must stay unreachable on a
// connected server before WatchQuorum moves the connection: longer than
// nats-server's longest raft election (9 s), so an election of the
// cluster's meta leader, which every server sees alike, never moves
// anyone.
const DefaultQuorumAfter = 12 * time.Second

// QuorumWatchConfig configures WatchQuorum.
type QuorumWatchConfig struct {
	// After is how long the probe must keep failing, with the connection
	// up, before a forced reconnect. Defaults to DefaultQuorumAfter. After
	// a forced reconnect that did not mend it (the probe still failing
	// on the next server: the whole cluster without a quorum), the next
	// one waits twice as long, up to 4 × After; a probe answered resets
	// it.
	After time.Duration
	// Every is the probe interval; one probe waits at most Every for its
	// answer. Defaults to 1 s.
	Every time.Duration
	// APIPrefix is the JetStream API prefix of the connection. Defaults
	// to "$JS.API." (jetstream.DefaultAPIPrefix).
	APIPrefix string
	// Logger receives why a connection was moved. Defaults to
	// zerolog.Nop().
	Logger zerolog.Logger
	// OnReconnect, when set, is called after each forced reconnect with
	// the reason (for a metric). Nil: nothing is called.
	OnReconnect func(why string)
}

// WithDefaults returns c with zero fields set to their defaults.
func (c QuorumWatchConfig) WithDefaults() QuorumWatchConfig {
	if c.After <= 0 {
		c.After = DefaultQuorumAfter
	}
	if c.Every <= 0 {
		c.Every = time.Second
	}
	if c.APIPrefix == "" {
		c.APIPrefix = "$JS.API."
	}
	if !strings.HasSuffix(c.APIPrefix, ".") {
		c.APIPrefix += "."
	}
	return c
}

// QuorumWatch is a running watch started by WatchQuorum.
type QuorumWatch struct {
	cancel     context.CancelFunc
	done       chan struct{}
	reconnects atomic.Int64
}

// WatchQuorum probes, every cfg.Every until ctx ends or Stop, whether
// nc's server reaches a JetStream quorum ($JS.API.INFO answered without a
// 503), and calls nc.ForceReconnect when it has not for cfg.After while
// the connection was up, logging why (a warning with the server and the
// last failure). A server pool of one URL is never forced (there is
// nowhere to go: it is logged once a failing spell). A probe the server
// refuses for permissions (a role without $JS.API.INFO) ends the watch
// with a warning. Consumers on nc are resubscribed by nats.go on the new
// server as after any reconnect. nc must have been connected.
func WatchQuorum(ctx context.Context, nc *nats.Conn, cfg QuorumWatchConfig) *QuorumWatch {
	cfg = cfg.WithDefaults()
	ctx, cancel := context.WithCancel(ctx)
	w := &QuorumWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.run(ctx, nc, cfg)
	}()
	return w
}

// Stop ends the watch and waits until it has ended. Safe to call more
// than once.
func (w *QuorumWatch) Stop() {
	w.cancel()
	<-w.done
}

// Reconnects is how many reconnects the watch has forced.
func (w *QuorumWatch) Reconnects() int64 { return w.reconnects.Load() }

// probeResult is one probe's outcome.
type probeResult int

const (
	probeOK      probeResult = iota // answered: the server reaches the meta leader
	probeFailed                     // 503, no responders, or no answer
	probeUnknown                    // the connection was not up: nothing learnt
	probeDenied                     // the role may not ask
)

func (w *QuorumWatch) run(ctx context.Context, nc *nats.Conn, cfg QuorumWatchConfig) {
	log := cfg.Logger
	st := quorumState{after: cfg.After}
	subj := cfg.APIPrefix + "INFO"
	tick := time.NewTicker(cfg.Every)
	defer tick.Stop()
	for {
		res, why := probeQuorum(nc, subj, cfg.Every)
		if res == probeDenied {
			log.Warn().Str("subject", subj).Str("error", why).Msg("quorum watch stopped: this connection may not ask JetStream's account info")
			return
		}
		switch st.observe(time.Now(), res, why) {
		case quorumReconnect:
			if servers := nc.Servers(); len(servers) < 2 {
				if !st.told {
					st.told = true
					log.Warn().Str("server", nc.ConnectedUrlRedacted()).Dur("for", st.failingFor(time.Now())).Str("last", why).
						Msg("JetStream unreachable on this server and no other server in the pool to move to")
				}
				break
			}
			from := nc.ConnectedUrlRedacted()
			reason := "JetStream without a quorum on " + nc.ConnectedServerName() + ": " + why
			log.Warn().Str("server", from).Dur("for", st.failingFor(time.Now())).Str("last", why).Int("forced", st.forced).
				Msg("JetStream unreachable through this server while connected (cut off from its cluster?): reconnecting to another server")
			if err := nc.ForceReconnect(); err != nil {
				if errors.Is(err, nats.ErrConnectionClosed) {
					return
				}
				log.Warn().Err(err).Msg("forced reconnect")
				break
			}
			w.reconnects.Add(1)
			if cfg.OnReconnect != nil {
				cfg.OnReconnect(reason)
			}
		case quorumRecovered:
			log.Info().Str("server", nc.ConnectedUrlRedacted()).Msg("JetStream reachable again")
		}
		if nc.IsClosed() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probeQuorum asks subj ($JS.API.INFO) once, waiting at most timeout.
func probeQuorum(nc *nats.Conn, subj string, timeout time.Duration) (probeResult, string) {
	if !nc.IsConnected() {
		return probeUnknown, "not connected"
	}
	msg, err := nc.Request(subj, nil, timeout)
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrNoResponders):
		return probeFailed, "no responders"
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		if le := nc.LastError(); le != nil && strings.Contains(strings.ToLower(le.Error()), "permissions violation") && strings.Contains(le.Error(), subj) {
			return probeDenied, le.Error()
		}
		if !nc.IsConnected() {
			return probeUnknown, "disconnected while asking"
		}
		return probeFailed, "no answer within " + timeout.String()
	default:
		return probeUnknown, err.Error()
	}
	var r struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if json.Unmarshal(msg.Data, &r) == nil && r.Error != nil && r.Error.Code == 503 {
		return probeFailed, r.Error.Description
	}
	// Any other answer (even another error) came from a server that
	// reaches the meta leader or knows better than a quorum loss.
	return probeOK, ""
}

// quorumState is the watch's decision, apart from the connection so that
// it can be tested on its own.
type quorumState struct {
	after   time.Duration // the base wait
	since   time.Time     // first failure of the current spell; zero: none
	forced  int           // forced reconnects in this spell
	told    bool          // "nowhere to go" logged in this spell
	failing bool
}

type quorumAction int

const (
	quorumNothing quorumAction = iota
	quorumReconnect
	quorumRecovered // a failing spell ended with an answer
)

// wait is how long the current spell must last before the next forced
// reconnect: after, doubled for each one already forced, at most 4 ×.
func (s *quorumState) wait() time.Duration {
	return s.after * time.Duration(1<<min(s.forced, 2))
}

func (s *quorumState) failingFor(now time.Time) time.Duration {
	if s.since.IsZero() {
		return 0
	}
	return now.Sub(s.since)
}

// observe takes one probe's outcome at now and says what to do.
func (s *quorumState) observe(now time.Time, res probeResult, why string) quorumAction {
	switch res {
	case probeOK:
		was := s.failing && s.forced > 0
		*s = quorumState{after: s.after}
		if was {
			return quorumRecovered
		}
		return quorumNothing
	case probeUnknown:
		// Disconnected: nats.go is moving the connection anyway; the
		// next server gets a fresh spell.
		s.since, s.failing = time.Time{}, false
		return quorumNothing
	}
	if s.since.IsZero() {
		s.since, s.failing = now, true
		return quorumNothing
	}
	if now.Sub(s.since) < s.wait() {
		return quorumNothing
	}
	s.forced++
	s.since = now // the next server gets its own wait
	return quorumReconnect
}
