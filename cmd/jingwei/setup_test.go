package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/stream"
)

// TestSetup: on a server with authorization on and no topology yet, setup
// as admin creates every stream and bucket (and is idempotent); the worker
// role may not, and is told who creates the topology.
func TestSetup(t *testing.T) {
	dir := t.TempDir()
	kd := stream.KeyDir(filepath.Join(dir, "auth"))
	if _, err := kd.Init(); err != nil {
		t.Fatal(err)
	}
	users, err := kd.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := stream.StartEmbedded(ctx, stream.EmbeddedConfig{Dir: filepath.Join(dir, "data"), Listen: "127.0.0.1:-1", Sync: stream.SyncInterval, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	url := srv.ClientURL()

	t0 := time.Now()
	code, _, stderr := runCLI("setup", "--server", url, "--nkey", kd.SeedFile(stream.RoleWorker))
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
	// The workers' roles now find the topology.
	if code, _, stderr := runCLI("export", "--server", url, "--auth", string(kd), "--session", "s-1"); code != exitOK {
		t.Fatalf("export as host after setup: exit %d %s", code, stderr)
	}
}
