package test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// snoopAction is the auth check's probe that a role sees no reply meant
// for another account.
const snoopAction = "see another account's replies (subscribe _INBOX.>)"

// TestAuthCheckLiveServeNoFalseAlarm runs `jingwei auth check` again and
// again against a live `jingwei serve` — idle, then with agents calling
// tools the whole time — and wants exit 0 every time: the trusted
// account's own replies on _INBOX.> (its tool worker's and recovery
// worker's requests, the other probers of that account) are no leak.
func TestAuthCheckLiveServeNoFalseAlarm(t *testing.T) {
	bin := jingweiBinary(t)
	srv := startServe(t, bin)
	check := func(phase string, i int) {
		r := jw(t, bin, "", "auth", "check", "--dir", srv.auth(), "--server", srv.url)
		if r.code != 0 {
			t.Errorf("%s run %d: exit %d (want 0):\n%s", phase, i, r.code, failRows(r.stdout))
		}
	}
	for i := range 3 {
		check("idle", i)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	calls := make([]int, 2)
	for a := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				r := jwAuth(t, bin, srv.url, srv.auth(), "call", "--session", fmt.Sprintf("busy-%d", a), "--task", "t-1",
					"--tool", "catalog.lookup", "--args", `{"sku":"A-1"}`, "--request-id", fmt.Sprintf("r-%d-%d", a, n), "--timeout", "5s")
				if r.code == 0 {
					calls[a]++
				}
			}
		}()
	}
	for i := range 3 {
		check("busy", i)
	}
	cancel()
	wg.Wait()
	if calls[0]+calls[1] == 0 {
		t.Fatal("no call succeeded while the checks ran: the busy phase was not busy")
	}
	t.Logf("%d calls answered during the busy checks", calls[0]+calls[1])
}

// TestAuthCheckCatchesReplyLeak: a server where the host role is
// over-granted — its user put in the agents' account, so it sees their
// replies — fails the check, exit 3, with the probe naming the agent's
// reply, and no other role's probe crying wolf beside it.
func TestAuthCheckCatchesReplyLeak(t *testing.T) {
	bin := jingweiBinary(t)
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
	e, err := natsnode.StartEmbedded(ctx, natsnode.EmbeddedConfig{
		Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: natsnode.SyncInterval, Auth: access.Users{Keys: keys},
		Options: func(o *server.Options) {
			var agent *server.Account
			for _, a := range o.Accounts {
				if a.Name == access.DefaultAccount+"_AGENT" {
					agent = a
				}
			}
			for _, u := range o.Nkeys {
				if u.Nkey == keys[access.RoleHost] {
					u.Account = agent
				}
			}
			if agent == nil {
				t.Error("no agent account")
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	if r := jw(t, bin, "", "setup", "--auth", string(dir), "--server", e.ClientURL()); r.code != 0 {
		t.Fatalf("setup: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	r := jw(t, bin, "", "auth", "check", "--dir", string(dir), "--server", e.ClientURL(), "--roles", "agent,host,worker")
	if r.code != 3 {
		t.Fatalf("auth check with a leak: exit %d, want 3\n%s", r.code, r.stdout)
	}
	rows := failRows(r.stdout)
	if !strings.Contains(rows, "host") || !strings.Contains(rows, snoopAction) || !strings.Contains(rows, "agent") {
		t.Fatalf("the leak is not reported as the host seeing the agent's reply:\n%s", rows)
	}
	for _, line := range strings.Split(rows, "\n") {
		// The agent now sees the host's replies too: that is the same leak.
		if strings.Contains(line, snoopAction) && !strings.HasPrefix(line, "host") && !strings.HasPrefix(line, "agent") {
			t.Errorf("a false alarm next to the real leak: %s", line)
		}
	}
}

// failRows returns the rows of an auth check's table marked FAIL.
func failRows(out string) string {
	var rows []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "FAIL") {
			rows = append(rows, line)
		}
	}
	if len(rows) == 0 {
		return out
	}
	return strings.Join(rows, "\n")
}
