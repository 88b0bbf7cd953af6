package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// TestSetup: on a server with authorization on and no topology yet, setup
// as admin creates every stream and bucket (and is idempotent); the worker
// role may not, and is told who creates the topology.
func TestSetup(t *testing.T) {
	kd, url := keyedServer(t)

	t0 := time.Now()
	code, _, stderr := runCLI("setup", "--server", url, "--nkey", kd.SeedFile(access.RoleWorker))
	if code != exitFailure || !strings.Contains(stderr, "admin role") {
		t.Fatalf("setup as worker: exit %d, %q; want 1 naming the admin role", code, stderr)
	}
	if took := time.Since(t0); took > 15*time.Second {
		t.Fatalf("setup as worker took %s", took)
	}
	for range 2 {
		code, stdout, stderr := runCLI("setup", "--server", url, "--auth", string(kd))
		if code != exitOK || !strings.Contains(stdout, "JW_EVENTS") || !strings.Contains(stdout, "JW_ANSWERS") || !strings.Contains(stdout, "in place") {
			t.Fatalf("setup as admin: exit %d\n%s\n%s", code, stdout, stderr)
		}
	}
	// --json: one object naming every stream and bucket.
	code, stdout, stderr := runCLI("setup", "--server", url, "--auth", string(kd), "--json")
	var out setupOutput
	if err := json.Unmarshal([]byte(stdout), &out); code != exitOK || err != nil {
		t.Fatalf("setup --json: exit %d, %v\n%s\n%s", code, err, stdout, stderr)
	}
	if out.Prefix != "jw" || len(out.Streams) != 6 || len(out.Buckets) != 3 || out.Streams[0].Name != "JW_EVENTS" || out.Streams[0].Replicas != 1 {
		t.Errorf("setup --json: %+v; want prefix jw, 6 streams starting with JW_EVENTS (1 replica), 3 buckets", out)
	}
	// The workers' roles now find the topology: the session is read, and
	// has no events (unknown_session, not a missing stream).
	if code, stdout, stderr := runCLI("export", "--server", url, "--auth", string(kd), "--session", "s-1"); code != exitRefused || errorCode(stdout) != string(schema.CodeUnknownSession) {
		t.Fatalf("export as host after setup: exit %d %s %s", code, stdout, stderr)
	}
}

// keyedServer starts an embedded server with authorization on (the role
// keys of a fresh key directory) and no topology yet; it returns the key
// directory and the server's URL. The server stops with the test.
func keyedServer(t *testing.T) (access.KeyDir, string) {
	t.Helper()
	dir := t.TempDir()
	kd := access.KeyDir(filepath.Join(dir, "auth"))
	if _, err := kd.Init(); err != nil {
		t.Fatal(err)
	}
	users, err := kd.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := natsnode.StartEmbedded(context.Background(), natsnode.EmbeddedConfig{Dir: filepath.Join(dir, "data"), Listen: "127.0.0.1:-1", Sync: natsnode.SyncInterval, Auth: access.Users{Keys: users}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return kd, srv.ClientURL()
}

// TestSetupConfirmReplaced: JW_REVIEWS deleted by the admin and created
// again by the next setup no longer matches the identity setup recorded:
// setup names it and exits 1, and so does every later setup, until
// --confirm-replaced JW_REVIEWS records it as it is now. The recoverer
// role reads the record (stream info); the worker role may not rewrite
// it.
func TestSetupConfirmReplaced(t *testing.T) {
	kd, url := keyedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code, stdout, stderr := runCLI("setup", "--server", url, "--auth", string(kd)); code != exitOK {
		t.Fatalf("setup: exit %d\n%s\n%s", code, stdout, stderr)
	}
	connect := func(r access.Role) jetstream.JetStream {
		nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, NKeySeedFile: kd.SeedFile(r)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		return js
	}
	admin, recoverer, worker := connect(access.RoleAdmin), connect(access.RoleRecoverer), connect(access.RoleWorker)
	if ps, err := stream.CheckIdentity(ctx, recoverer, ""); err != nil || len(ps) != 0 {
		t.Fatalf("CheckIdentity as recoverer after setup = %v, %v; want no problem", ps, err)
	}
	if err := admin.DeleteStream(ctx, "JW_REVIEWS"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		code, _, stderr := runCLI("setup", "--server", url, "--auth", string(kd))
		if code != exitFailure || !strings.Contains(stderr, "JW_REVIEWS") || !strings.Contains(stderr, "--confirm-replaced JW_REVIEWS") {
			t.Fatalf("setup after JW_REVIEWS was replaced: exit %d, %q; want 1 naming it and the confirm flag", code, stderr)
		}
	}
	ps, err := stream.CheckIdentity(ctx, recoverer, "")
	if err != nil || len(ps) != 1 || ps[0].Stream != "JW_REVIEWS" {
		t.Fatalf("CheckIdentity as recoverer = %v, %v; want JW_REVIEWS replaced", ps, err)
	}
	// The worker role cannot confirm it for the operator.
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second) // a refused request is never answered
	defer wcancel()
	if _, err := stream.ConfirmIdentity(wctx, worker, "", 1, "JW_REVIEWS"); err == nil {
		t.Fatal("the worker role rewrote the identity record")
	}
	if code, _, stderr := runCLI("setup", "--server", url, "--auth", string(kd), "--confirm-replaced", "JW_NOPE"); code != exitFailure || !strings.Contains(stderr, "not a protected stream") {
		t.Fatalf("confirm of an unknown stream: exit %d %q", code, stderr)
	}
	code, stdout, stderr := runCLI("setup", "--server", url, "--auth", string(kd), "--confirm-replaced", "JW_REVIEWS")
	if code != exitOK || !strings.Contains(stdout, "identity of JW_REVIEWS confirmed") {
		t.Fatalf("setup --confirm-replaced JW_REVIEWS: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if ps, err := stream.CheckIdentity(ctx, recoverer, ""); err != nil || len(ps) != 0 {
		t.Fatalf("CheckIdentity after the confirmation = %v, %v; want no problem", ps, err)
	}
	if code, _, stderr := runCLI("setup", "--server", url, "--auth", string(kd)); code != exitOK {
		t.Fatalf("setup after the confirmation: exit %d %s", code, stderr)
	}
}
