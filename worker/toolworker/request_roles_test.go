package toolworker_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
)

// roleWorld is an embedded server with authorization on, as `jingwei
// serve` runs it: the admin's topology (to read what happened), the tool
// worker's (worker credentials) and an agent's plain connection.
type roleWorld struct {
	dir    access.KeyDir
	url    string
	admin  *stream.Topology
	worker *stream.Topology
	agent  jetstream.JetStream
}

// startRoles starts the server and ensures the topology with cfg (the
// worker opens it with the same cfg: limits are the writer's).
func startRoles(t *testing.T, cfg stream.TopologyConfig) *roleWorld {
	t.Helper()
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	keys, err := dir.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := natsnode.StartEmbedded(ctx, natsnode.EmbeddedConfig{Auth: access.Users{Keys: keys}, Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: natsnode.SyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	w := &roleWorld{dir: dir, url: e.ClientURL()}
	js, _ := jetstream.New(w.conn(t, access.RoleAdmin))
	if w.admin, err = stream.EnsureTopology(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	wjs, _ := jetstream.New(w.conn(t, access.RoleWorker))
	if w.worker, err = stream.OpenTopology(ctx, wjs, cfg); err != nil {
		t.Fatal(err)
	}
	w.agent, _ = jetstream.New(w.conn(t, access.RoleAgent))
	return w
}

// conn connects as role with its nkey seed file, as a client would.
func (w *roleWorld) conn(t *testing.T, r access.Role) *nats.Conn {
	t.Helper()
	nc, err := natsnode.Connect(context.Background(), natsnode.ConnectConfig{URL: w.url, NKeySeedFile: w.dir.SeedFile(r), Name: "test " + string(r)})
	if err != nil {
		t.Fatalf("connect as %s: %v", r, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// publishAs publishes q on jw.requests.<session> with the agent's
// credentials under Msg-Id id and returns the acknowledgement.
func (w *roleWorld) publishAs(t *testing.T, q schema.Request, id string) *jetstream.PubAck {
	t.Helper()
	b, err := json.Marshal(q)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := w.agent.Publish(context.Background(), w.admin.Names().RequestsSubject(q.Session), b, jetstream.WithMsgID(id))
	if err != nil {
		t.Fatalf("agent publishes %s: %v", q.RequestID, err)
	}
	return ack
}

// answer returns the answer recorded for requestID, if any.
func (w *roleWorld) answer(t *testing.T, session, requestID string) (schema.Answer, bool) {
	t.Helper()
	a, ok, err := w.admin.Answers().FindAnswer(context.Background(), session, requestID)
	if err != nil {
		t.Fatal(err)
	}
	return a, ok
}

// callOf returns the tool.call carrying requestID on the session log and
// whether a tool.result follows it.
func (w *roleWorld) callOf(t *testing.T, session, requestID string) (c *schema.Call, done bool, n int) {
	t.Helper()
	h, err := w.admin.Logs().Load(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range h {
		switch {
		case ev.Call != nil && ev.Call.RequestID == requestID:
			c, n = ev.Call, n+1
		case ev.Result != nil && c != nil && ev.Result.CallID == c.CallID:
			done = true
		}
	}
	return c, done, n
}

// contentMsgID is the Nats-Msg-Id of a request bound to its content, as
// docs/protocol.md §12 spells it for a client in any language:
// "request.<session>.<hex of the first 16 bytes of sha256(request_id)>."
// followed by the hex of the first 16 bytes of sha256 of the canonical
// JSON (§6.1) of {"arguments","task","tool"}.
func contentMsgID(t *testing.T, q schema.Request) string {
	t.Helper()
	obj, err := json.Marshal(struct {
		Arguments json.RawMessage `json:"arguments"`
		Task      string          `json:"task"`
		Tool      string          `json:"tool"`
	}{q.Arguments, q.Task, q.Tool})
	if err != nil {
		t.Fatal(err)
	}
	c, err := schema.Canonical(obj)
	if err != nil {
		t.Fatal(err)
	}
	rid := sha256.Sum256([]byte(q.RequestID))
	d := sha256.Sum256(c)
	return "request." + q.Session + "." + hex.EncodeToString(rid[:16]) + "." + hex.EncodeToString(d[:16])
}

// ledger is a payments.charge tool that records every charge by account.
type ledger struct {
	mu      sync.Mutex
	charges map[string]int
	receipt int // bytes of padding in each receipt
}

func (l *ledger) charged(account string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.charges[account]
}

func (l *ledger) tool(outputLimit int) worker.Tool {
	return worker.Tool{
		Metadata:    effect.Metadata{Name: "payments.charge"}.WithEffect(effect.NonIdempotent, "charge-v1"),
		InputSchema: json.RawMessage(`{"type":"object","properties":{"account":{"type":"string"},"amount":{"type":"integer"}},"required":["account","amount"]}`),
		OutputLimit: outputLimit,
		Body: func(_ context.Context, req worker.BodyRequest) (json.RawMessage, error) {
			var a struct{ Account string }
			if err := json.Unmarshal(req.Arguments, &a); err != nil {
				return nil, err
			}
			l.mu.Lock()
			if l.charges == nil {
				l.charges = map[string]int{}
			}
			l.charges[a.Account]++
			l.mu.Unlock()
			pad := make([]byte, l.receipt)
			for i := range pad {
				pad[i] = 'r'
			}
			return json.Marshal(map[string]string{"charged": a.Account, "receipt": string(pad)})
		},
	}
}

var _ = streamtest.Eventually
