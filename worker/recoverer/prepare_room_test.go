package recoverer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// roomServer is a jingwei server with the roles' accounts on, a recovery
// worker connected as the recoverer role and a plain client holding the
// worker credential.
type roomServer struct {
	rec    *Recoverer
	topo   *stream.Topology // the recoverer's
	worker jetstream.JetStream
}

func startRoomServer(t *testing.T) *roomServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	keys, err := dir.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := natsnode.StartEmbedded(ctx, natsnode.EmbeddedConfig{Auth: access.Users{Keys: keys}, Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: natsnode.SyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	connect := func(r access.Role) (*nats.Conn, jetstream.JetStream) {
		nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: srv.ClientURL(), NKeySeedFile: dir.SeedFile(r), Name: "test " + string(r)})
		if err != nil {
			t.Fatalf("connect as %s: %v", r, err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js
	}
	_, adminJS := connect(access.RoleAdmin)
	if _, err := stream.EnsureTopology(ctx, adminJS, stream.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}
	_, recJS := connect(access.RoleRecoverer)
	topo, err := stream.OpenTopology(ctx, recJS, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := New(Config{Topology: topo, Name: "rec", DisableService: true, PlannerKey: newPlanner(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, workerJS := connect(access.RoleWorker)
	return &roomServer{rec: rec, topo: topo, worker: workerJS}
}

// fillBytes writes, with js's plain publishes, a call c-1 of an
// idempotent tool that failed after it started (a retry is allowed) if
// the session log is empty, then finished calls with large arguments
// until the session's serialized history leaves exactly room bytes before
// the writers' limit (16 MiB less the fence reserve of 64 KiB).
func fillBytes(t *testing.T, js jetstream.JetStream, topo *stream.Topology, session string, room int64) {
	t.Helper()
	ctx := context.Background()
	var used int64
	var last uint64
	err := topo.Reader().ReadSubject(ctx, topo.Names().StreamName("EVENTS"), topo.Names().EventsSubject(session), func(m *jetstream.RawStreamMsg) error {
		used += serializedSize(len(m.Data), m.Sequence)
		last = m.Sequence
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(ev schema.Event) uint64 {
		t.Helper()
		b, err := schema.EncodeEvent(withSession(ev, session))
		if err != nil {
			t.Fatal(err)
		}
		ack, err := js.Publish(ctx, topo.Names().EventsSubject(session), b)
		if err != nil {
			t.Fatal(err)
		}
		used += serializedSize(len(b), ack.Sequence)
		return ack.Sequence
	}
	if last == 0 {
		contract := effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}
		publish(schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A-1","qty":1}`), StartMarker: true,
			Operation: &schema.Operation{Task: "t-1", Key: "op-1", Contract: contract}}})
		publish(schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-1"}})
		last = publish(schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusFailed, Retryable: true, Error: "upstream 503"}})
	}

	limit := int64(schema.MaxHistoryBytes - schema.MaxHistoryBytes/256)
	const chunk = 900_000
	for i := int(last); ; i++ {
		// A finished call with large arguments: a tool.call and its result.
		call := func(n int) schema.Event {
			a, _ := json.Marshal(map[string]string{"pad": strings.Repeat("x", n)})
			return schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: fmt.Sprintf("f-%d", i), Tool: "catalog.lookup", Arguments: a,
				Operation: &schema.Operation{Task: "t-1", Key: fmt.Sprintf("op-f-%d", i), Contract: effect.Contract{Effect: effect.ReadOnly, Revision: "catalog-v1"}}}}
		}
		result := schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: fmt.Sprintf("f-%d", i), Status: schema.StatusOK, Output: json.RawMessage(`{}`)}}
		rb, _ := schema.EncodeEvent(withSession(result, session))
		resultSize := serializedSize(len(rb), last+2)
		left := limit - room - used - resultSize
		if left <= 0 {
			t.Fatalf("filled past the mark: %d bytes left", left)
		}
		n := chunk
		if probe, _ := schema.EncodeEvent(withSession(call(n), session)); serializedSize(len(probe), last+1) >= left {
			// The last call: sized to leave exactly room bytes.
			n -= int(serializedSize(len(probe), last+1) - left)
			if n < 0 {
				t.Fatalf("cannot size the last call (%d bytes left)", left)
			}
			publish(call(n))
			publish(result)
			break
		}
		publish(call(n))
		last = publish(result)
	}
	if got := limit - used; got != room {
		t.Fatalf("the session leaves %d bytes before the writers' limit, want %d", got, room)
	}
}

// withSession stamps ev as fillBytes publishes it, with a time whose
// encoding has a fixed length, so that its size is known before.
func withSession(ev schema.Event, session string) schema.Event {
	ev.V, ev.Session, ev.Epoch, ev.At = schema.Version, session, 1, time.Now().UTC().Truncate(time.Second).Add(123456789)
	return ev
}

// serializedSize is what an event of a stored payload of n bytes at seq
// takes in a serialized history (docs/protocol.md §14): the payload, its
// "seq":N member and a newline.
func serializedSize(n int, seq uint64) int64 {
	return int64(n + len(`"seq":,`) + len(strconv.FormatUint(seq, 10)) + 1)
}

// TestPrepareRefusesSessionFullInBytes: a session filled in bytes (a few
// dozen events, far from the event limit) by a plain client holding the
// worker credential, as the security review did, until less room is left
// before the writers' limit than a retry needs (its call with the
// arguments, its start, its result, and a fence): prepare refuses with
// history_too_large, and nothing is stored in jw_plans or published on
// JW_PLANS. Before, prepare counted events only and issued the plan, which
// no tool worker could then run. A session of the same shape with room
// left gets its plan.
func TestPrepareRefusesSessionFullInBytes(t *testing.T) {
	ctx := context.Background()
	rs := startRoomServer(t)
	plans := stream.NewPlans(rs.topo.PlanBucket)

	fillBytes(t, rs.worker, rs.topo, "s-full", 726)
	_, err := rs.rec.Prepare(ctx, "s-full", "c-1")
	if !errors.Is(err, schema.ErrHistoryTooLarge) {
		t.Fatalf("Prepare on a session full in bytes: %v, want history_too_large", err)
	}
	if rec, err := plans.Get(ctx, recovery.PlanID("s-full", "c-1")); !errors.Is(err, stream.ErrPlanNotIssued) {
		t.Fatalf("a plan was stored for the full session: %+v %v", rec.Plan, err)
	}
	if seq, err := rs.topo.Plans().PlanMessage(ctx, "s-full", recovery.PlanID("s-full", "c-1")); err != nil || seq != 0 {
		t.Fatalf("a plan was published for the full session: seq %d %v", seq, err)
	}

	// Room for the call, its start and a small result, but not for what
	// a tool worker keeps for a result of the tool's output limit before it
	// spends the plan (worker.RetryRoom): refused too, not issued for a
	// worker to refuse.
	fillBytes(t, rs.worker, rs.topo, "s-tight", 64<<10)
	if _, err := rs.rec.Prepare(ctx, "s-tight", "c-1"); !errors.Is(err, schema.ErrHistoryTooLarge) {
		t.Fatalf("Prepare on a session with less room than a tool worker asks for a retry: %v, want history_too_large", err)
	}

	fillBytes(t, rs.worker, rs.topo, "s-room", 2<<20)
	p, err := rs.rec.Prepare(ctx, "s-room", "c-1")
	if err != nil {
		t.Fatalf("Prepare on a session with room for the retry: %v", err)
	}
	if p.PlanID != recovery.PlanID("s-room", "c-1") {
		t.Fatalf("plan %s, want %s", p.PlanID, recovery.PlanID("s-room", "c-1"))
	}
}

// TestPlanNotDeliveredAgainToFullSession: a plan issued while its session
// had room, whose session then filled up in bytes, is refused by the tool
// worker (its runtime checks the room before it consumes the plan) and its
// message dropped; the host asking again is answered history_too_large,
// and the plan is not published again for a worker to refuse once more.
func TestPlanNotDeliveredAgainToFullSession(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	r := e.recoverer("a")
	fillBytes(t, e.topo.JS, e.topo, "s-1", 2<<20)
	p, err := r.Prepare(ctx, "s-1", "c-1")
	if err != nil {
		t.Fatalf("Prepare with room: %v", err)
	}
	fillBytes(t, e.topo.JS, e.topo, "s-1", 726)
	e.dropPlanMsgs("s-1")
	if _, err := r.Prepare(ctx, "s-1", "c-1"); !errors.Is(err, schema.ErrHistoryTooLarge) {
		t.Fatalf("Prepare asking again on the full session: %v, want history_too_large", err)
	}
	if ids, _ := e.planMsgIDs("s-1"); len(ids) != 1 || ids[0] != p.PlanID {
		t.Fatalf("plan messages %v, want only the first publication %s", ids, p.PlanID)
	}
}
