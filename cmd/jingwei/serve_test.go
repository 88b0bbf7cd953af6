package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker/service"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var listeningRE = regexp.MustCompile(`listening on (nats://[0-9.:]+)`)

// startServe runs serve on dir until the returned stop is called; it
// returns the client URL and serve's stderr.
func startServe(t *testing.T, dir string, extra ...string) (url string, stderr *lockedBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out lockedBuffer
	stderr = &lockedBuffer{}
	done := make(chan int, 1)
	args := append([]string{"serve", "--listen", "127.0.0.1:-1", "--data", dir, "--sync", "interval", "--lease-ttl", "1s", "--log-level", "warn"}, extra...)
	go func() { done <- run(ctx, args, &out, stderr) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := listeningRE.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d early: %s", code, stderr)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve not listening after 20s: %s", stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var once sync.Once
	code := -1
	stop = func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("serve did not stop within 30s of cancel")
			}
		})
		return code
	}
	t.Cleanup(func() { stop() })
	return url, stderr, stop
}

var pubKeyRE = regexp.MustCompile(`public key (U[A-Z0-9]{55})`)

// serve creates and trusts a reviewer key once, runs the recovery worker's
// service and a tool worker (a call through jw.api.call completes), shuts
// down cleanly on cancel, and reuses its key on the next start.
func TestServeAllInOne(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	url, stderr, stop := startServe(t, dir)
	keyPath := filepath.Join(dir, reviewerKeyFile)
	st, err := os.Stat(keyPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("reviewer key %s: %v %v, want a 0600 file", keyPath, st, err)
	}
	if !strings.Contains(stderr.String(), "created reviewer key "+keyPath) {
		t.Fatalf("serve does not say where the new key is: %s", stderr)
	}
	pub := pubKeyRE.FindStringSubmatch(stderr.String())
	if pub == nil {
		t.Fatalf("no public key printed: %s", stderr)
	}

	// Authorization is on: a client without credentials is refused; the
	// role keys are private files in DATA/auth, and serve says so.
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("a client without credentials was let in")
	}
	if st, err := os.Stat(filepath.Join(dir, "auth")); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("auth directory: %v %v, want 0700", st, err)
	}
	for _, r := range access.Roles {
		f := access.KeyDir(filepath.Join(dir, "auth")).SeedFile(r)
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want a 0600 file", f, st, err)
		}
	}
	nc := connectRole(t, url, dir, access.RoleAgent)
	defer nc.Close()
	req := []byte(`{"v":1,"request_id":"r-1","session":"s-1","task":"t-1","tool":"catalog.lookup","arguments":{"sku":"A-1"}}`)
	var msg *nats.Msg
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		msg, err = nc.Request("jw.api.call", req, 20*time.Second)
		if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline) {
			continue // the service is still registering
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	var ev schema.Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil || ev.Type != schema.TypeResult || ev.Result.Status != schema.StatusOK {
		t.Fatalf("jw.api.call answered %s (%v), want an ok tool.result", msg.Data, err)
	}
	nc.Close()

	// `nats micro ls` as the host: both services answer $SRV.PING, each
	// on its own connection (the recovery worker's "jingwei", the tool
	// worker's "jingwei-gateway").
	host := connectRole(t, url, dir, access.RoleHost)
	defer host.Close()
	pings, err := host.SubscribeSync(host.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	if err := host.PublishRequest("$SRV.PING", pings.Subject, nil); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		m, err := pings.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("$SRV.PING: services seen %v: %v", seen, err)
		}
		var p micro.Ping
		if err := json.Unmarshal(m.Data, &p); err != nil {
			t.Fatalf("ping answer %s: %v", m.Data, err)
		}
		seen[p.Name] = true
	}
	if !seen[service.Name] || !seen[service.GatewayName] {
		t.Fatalf("$SRV.PING answered by %v, want %s and %s", seen, service.Name, service.GatewayName)
	}
	host.Close()
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d after cancel: %s", code, stderr)
	}

	// Second start: same key, same data.
	_, stderr2, stop2 := startServe(t, dir, "--no-worker")
	if !strings.Contains(stderr2.String(), "using reviewer key "+keyPath) || !strings.Contains(stderr2.String(), pub[1]) {
		t.Fatalf("second start does not reuse the key %s: %s", pub[1], stderr2)
	}
	if code := stop2(); code != exitOK {
		t.Fatalf("serve exited %d after cancel: %s", code, stderr2)
	}
}

// connectRole connects to a serve on url as role, with its key in
// DATA/auth.
func connectRole(t *testing.T, url, data string, r access.Role) *nats.Conn {
	t.Helper()
	kp, err := access.KeyDir(filepath.Join(data, "auth")).KeyPair(r)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, natsnode.NkeyOption(kp))
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// TestServeRefusesInsecureData: a data directory or key file that other
// users can read or write is refused at start with the chmod that fixes
// it, and --no-auth is refused on a non-loopback address.
func TestServeRefusesInsecureData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	_, _, stop := startServe(t, dir, "--no-worker")
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d", code)
	}
	for _, tc := range []struct {
		path string
		mode os.FileMode
		fix  string
	}{
		{dir, 0o755, "chmod 700 " + dir},
		{filepath.Join(dir, "auth"), 0o750, "chmod 700 " + filepath.Join(dir, "auth")},
		{filepath.Join(dir, "auth", "worker.nk"), 0o644, "chmod 600 " + filepath.Join(dir, "auth", "worker.nk")},
		{filepath.Join(dir, reviewerKeyFile), 0o640, "chmod 600 " + filepath.Join(dir, reviewerKeyFile)},
	} {
		st, _ := os.Stat(tc.path)
		if err := os.Chmod(tc.path, tc.mode); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runCLI("serve", "--listen", "127.0.0.1:-1", "--data", dir, "--no-worker")
		if code != exitUsage || !strings.Contains(stderr, tc.fix) {
			t.Errorf("%s at %04o: exit %d, stderr %q; want exit 2 naming %q", tc.path, tc.mode, code, stderr, tc.fix)
		}
		_ = os.Chmod(tc.path, st.Mode().Perm())
	}
	code, _, stderr := runCLI("serve", "--listen", "0.0.0.0:-1", "--data", dir, "--no-auth")
	if code != exitUsage || !strings.Contains(stderr, "needs authorization") {
		t.Fatalf("--no-auth on 0.0.0.0: exit %d %q", code, stderr)
	}
}

// TestServeRefusesWeakenedTopology: a jingwei stream recreated without
// its protections (here JW_REVIEWS allowing deletes, as an attacker with
// admin rights once, or an old version, left it) stops serve at start,
// naming the setting and the repair; --repair-topology mends it.
func TestServeRefusesWeakenedTopology(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	url, _, stop := startServe(t, dir, "--no-worker")
	nc := connectRole(t, url, dir, access.RoleAdmin)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	s, err := js.Stream(ctx, "JW_REVIEWS")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if err := js.DeleteStream(ctx, "JW_REVIEWS"); err != nil {
		t.Fatal(err)
	}
	cfg.DenyDelete, cfg.DenyPurge = false, false
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d", code)
	}
	code, _, stderr := runCLI("serve", "--listen", "127.0.0.1:-1", "--data", dir, "--no-worker", "--sync", "interval")
	if code != exitFailure || !strings.Contains(stderr, "JW_REVIEWS") || !strings.Contains(stderr, "deny_delete") || !strings.Contains(stderr, "--repair-topology") {
		t.Fatalf("serve on a weakened JW_REVIEWS: exit %d, %q", code, stderr)
	}
	_, _, stop = startServe(t, dir, "--no-worker", "--repair-topology")
	if code := stop(); code != exitOK {
		t.Fatalf("serve --repair-topology exited %d", code)
	}
	_, _, stop = startServe(t, dir, "--no-worker")
	if code := stop(); code != exitOK {
		t.Fatalf("serve after the repair exited %d", code)
	}
}

func TestServeUsage(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--sync", "sometimes"},
		{"serve", "--lease-ttl", "10ms"},
		{"serve", "--max-sessions", "0"},
		{"serve", "stray"},
	} {
		if code, _, _ := runCLI(args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

func TestWorkerUsage(t *testing.T) {
	for _, args := range [][]string{
		{"worker", "--lease-ttl", "500ms"},
		{"worker", "--max-sessions", "0"},
		{"worker", "--tool-delay", "-1s"},
		{"worker", "--log-level", "loud"},
		{"worker", "stray"},
	} {
		if code, _, _ := runCLI(args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// TestCLIKeepsItsWord: help of an unknown command is a usage error like the
// unknown command itself, and --timeout bounds connecting to a server that
// is not there.
func TestCLIKeepsItsWord(t *testing.T) {
	if code, _, stderr := runCLI("help", "nosuch"); code != exitUsage || !strings.Contains(stderr, `unknown command "nosuch"`) {
		t.Errorf("help nosuch: exit %d %q, want 2", code, stderr)
	}
	t0 := time.Now()
	code, stdout, _ := runCLI("status", "--timeout", "1s", "--server", "nats://127.0.0.1:1")
	if took := time.Since(t0); code != exitUnreachable || took > 2500*time.Millisecond || !strings.Contains(stdout, `"unreachable"`) {
		t.Errorf("status --timeout 1s against no server: exit %d after %s (%s), want 4 (unreachable) within about a second", code, took, stdout)
	}
	if strings.Contains(stdout, "requires credentials") {
		t.Errorf("a server that is not there is not an authorization problem: %s", stdout)
	}

	// A server that is there: a refused or missing credential is not
	// answered with "is a server running?".
	dir := filepath.Join(t.TempDir(), "data")
	url, serveErr, _ := startServe(t, dir, "--log-level", "info")
	if strings.Contains(serveErr.String(), "Starting nats-server") {
		t.Errorf("serve printed the embedded server's banner without --server-log: %s", serveErr)
	}
	if _, withLog, _ := startServe(t, filepath.Join(t.TempDir(), "data"), "--log-level", "info", "--server-log", "--no-worker"); !strings.Contains(withLog.String(), "Starting nats-server") {
		t.Errorf("serve --server-log does not show the embedded server's log: %s", withLog)
	}
	stranger := filepath.Join(t.TempDir(), "stranger.nk") // a user key the server does not know
	if code, _, stderr := runCLI("keys", "new", "--out", stranger); code != exitOK {
		t.Fatalf("keys new: %d %s", code, stderr)
	}
	for _, args := range [][]string{
		{"status", "--server", url, "--timeout", "5s"},
		{"status", "--server", url, "--timeout", "5s", "--creds", filepath.Join(dir, "nosuch.creds")},
		{"status", "--server", url, "--timeout", "5s", "--nkey", stranger},
	} {
		code, stdout, stderr := runCLI(args...)
		if code == exitOK || strings.Contains(stdout+stderr, "is a server running") {
			t.Errorf("%v: exit %d, %s%s; want a failure that does not ask whether a server runs", args[3:], code, stdout, stderr)
		}
	}

	// call: stdout is one JSON document with --json, text without it.
	auth := filepath.Join(dir, "auth")
	for _, c := range []struct {
		args string
		ok   bool
	}{{`{"sku":"A-1"}`, true}, {`{"sku":7}`, false}} {
		base := []string{"call", "--server", url, "--auth", auth, "--session", "s-json", "--tool", "catalog.lookup", "--args", c.args, "--timeout", "20s"}
		code, stdout, stderr := runCLI(append(base, "--json")...)
		if (code == exitOK) != c.ok {
			t.Fatalf("call --json %s: exit %d: %s %s", c.args, code, stdout, stderr)
		}
		dec := json.NewDecoder(strings.NewReader(stdout))
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil || dec.More() {
			t.Errorf("call --json %s: stdout is not one JSON document (%v): %q", c.args, err, stdout)
		}
		if _, hasErr := doc["error"]; hasErr == c.ok {
			t.Errorf("call --json %s: %q; want the error body exactly when the call is not ok", c.args, stdout)
		}
		code, stdout, stderr = runCLI(base...)
		if (code == exitOK) != c.ok || strings.Contains(stdout, `"error":`) || !strings.Contains(stdout, "status") {
			t.Errorf("call %s: exit %d, stdout %q (%s); want the text table and no JSON", c.args, code, stdout, stderr)
		}
	}

	// A second serve on the same port says so at once, and makes no key.
	port := url[strings.LastIndex(url, ":")+1:]
	dir2 := filepath.Join(t.TempDir(), "data2")
	t0 = time.Now()
	code, _, stderr := runCLI("serve", "--listen", "127.0.0.1:"+port, "--data", dir2, "--log-level", "warn")
	if took := time.Since(t0); code != exitFailure || !strings.Contains(stderr, "in use") || took > 3*time.Second {
		t.Errorf("second serve on port %s: exit %d after %s: %s; want 1 at once, saying the address is in use", port, code, took, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir2, reviewerKeyFile)); err == nil {
		t.Errorf("second serve on a taken port made a reviewer key")
	}
}
