package service_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker/service"
)

// TestServiceAnswersItsOwnPermissionDenied: a service whose connection
// lacks a grant one endpoint needs (here a jw.api.call handler that
// publishes a retry plan, which only the recoverer role may, served on a
// connection with the worker role's key) answers a request to that
// endpoint with permission_denied at once, naming the subject the server
// refused and the role the handler needs, instead of leaving the requester
// to time out; the service's other endpoint still answers. The request is
// made as an agent, a plain NATS client with the agent role's key.
func TestServiceAnswersItsOwnPermissionDenied(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keys := access.KeyDir(filepath.Join(t.TempDir(), "auth"))
	if _, err := keys.Init(); err != nil {
		t.Fatal(err)
	}
	pubs, err := keys.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := natsnode.StartEmbedded(ctx, natsnode.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1",
		Sync: natsnode.SyncInterval, Auth: access.Users{Keys: pubs}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	connect := func(r access.Role) *nats.Conn {
		nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: srv.ClientURL(), NKeySeedFile: keys.SeedFile(r), Name: "test " + string(r)})
		if err != nil {
			t.Fatalf("connect as %s: %v", r, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	adminJS, _ := jetstream.New(connect(access.RoleAdmin))
	if _, err := stream.EnsureTopology(ctx, adminJS, stream.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}

	svcConn := connect(access.RoleWorker) // the wrong role for what the handler does
	js, _ := jetstream.New(svcConn)
	svc, err := service.Start(ctx, service.Config{Conn: svcConn, Name: "permtest", Role: string(access.RoleRecoverer)},
		service.Endpoint{Name: service.EndpointCall, Handler: func(ctx context.Context, body []byte) (any, error) {
			if string(body) == "plan" {
				if _, err := js.Publish(ctx, stream.DefaultPrefix+".plans.s-1", []byte(`{}`)); err != nil {
					return nil, err
				}
			}
			return map[string]string{"ok": "yes"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })

	agent := connect(access.RoleAgent)
	subject := stream.APISubject("", service.EndpointCall)
	t0 := time.Now()
	m, err := agent.Request(subject, []byte("plan"), 10*time.Second)
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("request after %s: %v (want a permission_denied answer at once)", took, err)
	}
	var eb schema.ErrorBody
	if err := json.Unmarshal(m.Data, &eb); err != nil || eb.Error.Code == "" {
		t.Fatalf("answer %q after %s: not an error body (%v)", m.Data, took, err)
	}
	msg := eb.Error.Message
	if eb.Error.Code != schema.CodePermissionDenied || !strings.Contains(msg, `"jw.plans.s-1"`) || !strings.Contains(msg, "recoverer") {
		t.Errorf("answer %s: %s, want permission_denied naming \"jw.plans.s-1\" and role recoverer", eb.Error.Code, msg)
	}
	if got := m.Header.Get(micro.ErrorHeader); !strings.HasPrefix(got, string(schema.CodePermissionDenied)+":") {
		t.Errorf("Nats-Service-Error %q, want it to start with permission_denied:", got)
	}
	if took > time.Second {
		t.Errorf("answered after %s, want within 1 s", took)
	}
	t.Logf("answered after %s: %s", took.Round(time.Millisecond), msg)

	// What the role may do still works on the same service.
	m, err = agent.Request(subject, []byte("fine"), 5*time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"ok":"yes"`) {
		t.Errorf("a request needing no missing grant: %v %q", err, msgData(m))
	}
	_ = svc.Stop()

	// A service whose connection also carries other work (a tool
	// worker's: tool bodies run on it) narrows the watch to its own
	// subjects: a refusal of another operation on the connection, while
	// a request is answered, is not that request's, and its true answer
	// comes through.
	other := connect(access.RoleWorker)
	ojs, _ := jetstream.New(other)
	narrowed, err := service.Start(ctx, service.Config{Conn: other, Name: "permtest2", Role: string(access.RoleWorker),
		PermissionSubjects: []string{stream.DefaultPrefix + ".requests."}},
		service.Endpoint{Name: service.EndpointCall, Handler: func(ctx context.Context, body []byte) (any, error) {
			// Someone else's operation on the shared connection, refused.
			go func() {
				_, _ = ojs.Publish(context.WithoutCancel(ctx), stream.DefaultPrefix+".plans.s-2", []byte(`{}`))
			}()
			time.Sleep(300 * time.Millisecond)
			return map[string]string{"ok": "mine"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = narrowed.Stop() })
	if err := other.Flush(); err != nil { // its subscription is on the server before the request
		t.Fatal(err)
	}
	m, err = agent.Request(subject, []byte("x"), 10*time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"ok":"mine"`) {
		t.Errorf("narrowed service, another operation refused meanwhile: %v %q, want its own answer", err, msgData(m))
	}
}

func msgData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}
