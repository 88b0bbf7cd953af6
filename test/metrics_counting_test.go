package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// recoverProc is a `jingwei recover --metrics` process.
type recoverProc struct {
	name    string
	cmd     *exec.Cmd
	metrics string // its /metrics URL
}

// startRecover starts `jingwei recover` named name against srv, serving
// its metrics on a free port; it is killed at the end of the test.
func startRecover(t *testing.T, bin string, srv *serveProc, name string) *recoverProc {
	t.Helper()
	cmd := exec.Command(bin, "recover", "--name", name, "--lease-ttl", "1s", "--metrics", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(os.Environ(), "NATS_URL="+srv.url, "JINGWEI_AUTH="+srv.auth(), "JINGWEI_LOG_LEVEL=info")
	errb := &lockedBuf{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	p := &recoverProc{name: name, cmd: cmd}
	re := regexp.MustCompile(`metrics on (http://\S+/metrics)`)
	streamtest.Eventually(t, 20*time.Second, name+"'s metrics URL", func() bool {
		if m := re.FindStringSubmatch(errb.String()); m != nil {
			p.metrics = m[1]
			return true
		}
		return false
	})
	return p
}

// scrape reads p's metrics: each sample's value by its name and labels as
// printed (`name{a="b"}`); ok false if it did not answer within 2 s.
func (p *recoverProc) scrape() (map[string]float64, bool) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(p.metrics)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, false
	}
	out := map[string]float64{}
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			out[l[:i]] = v
		}
	}
	return out, true
}

// assessed is the sum of a scrape's jingwei_assessments_total series.
func assessed(m map[string]float64) float64 {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "jingwei_assessments_total{") {
			n += v
		}
	}
	return n
}

// distinctAssessments counts the distinct assessment ids (Jw-Assessment-Id,
// one value per assessment of a batch) in JW_ASSESSMENTS.
func distinctAssessments(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "JW_ASSESSMENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range m.Header.Values("Jw-Assessment-Id") {
			ids[id] = true
		}
	}
	return len(ids)
}

// callMany runs n catalog lookups through jw.api.call as the agent, each
// a call of its own (one assessment each).
func callMany(t *testing.T, nc *nats.Conn, tag string, n int) {
	t.Helper()
	for i := range n {
		req := fmt.Sprintf(`{"v":1,"request_id":"r-%s-%d","session":"s-count-%d","task":"t-1","tool":"catalog.lookup","arguments":{"sku":"A-1"}}`, tag, i, i%4)
		for deadline := time.Now().Add(20 * time.Second); ; {
			_, err := nc.Request("jw.api.call", []byte(req), 20*time.Second)
			if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
}

// quiet reports whether p's classifier has nothing pending.
func quiet(m map[string]float64) bool {
	return m["jingwei_recoverer_up"] == 1 && m["jingwei_recoverer_consumer_pending_events"] == 0 && m["jingwei_recoverer_consumer_ack_pending_events"] == 0
}

// TestMetricsCountingOneRecoverer: two recovery workers (`jingwei
// recover`) both publish every assessment; scraped, exactly one says it
// counts (jingwei_recoverer_counting) and the sum of their
// jingwei_assessments_total is the number of distinct assessments in
// JW_ASSESSMENTS. The counting one frozen (SIGSTOP, so it renews nothing
// and releases nothing), the other takes the counting over and counts the
// calls made after, and the sum never exceeds the distinct assessments —
// also once the frozen one runs again and catches up on its backlog.
func TestMetricsCountingOneRecoverer(t *testing.T) {
	bin := jingweiBinary(t)
	srv := startServe(t, bin, "--lease-ttl", "1s")
	recs := []*recoverProc{startRecover(t, bin, srv, "count-a"), startRecover(t, bin, srv, "count-b")}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: srv.url, NKeySeedFile: access.KeyDir(srv.auth()).SeedFile(access.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: srv.url, NKeySeedFile: access.KeyDir(srv.auth()).SeedFile(access.RoleAgent)})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()

	var counter, other *recoverProc
	streamtest.Eventually(t, 30*time.Second, "exactly one recovery worker counting", func() bool {
		a, okA := recs[0].scrape()
		b, okB := recs[1].scrape()
		if !okA || !okB {
			return false
		}
		switch {
		case a["jingwei_recoverer_counting"] == 1 && b["jingwei_recoverer_counting"] == 0:
			counter, other = recs[0], recs[1]
		case a["jingwei_recoverer_counting"] == 0 && b["jingwei_recoverer_counting"] == 1:
			counter, other = recs[1], recs[0]
		default:
			return false
		}
		return true
	})

	callMany(t, agent, "one", 24)
	var sum float64
	var distinct int
	streamtest.Eventually(t, 60*time.Second, "both recovery workers quiet and the sum equal to the distinct assessments", func() bool {
		a, okA := counter.scrape()
		b, okB := other.scrape()
		if !okA || !okB || !quiet(a) || !quiet(b) {
			return false
		}
		sum, distinct = assessed(a)+assessed(b), distinctAssessments(t, js)
		if sum > float64(distinct) {
			t.Fatalf("sum of assessments_total %v > %d distinct assessments (%s %v, %s %v)", sum, distinct, counter.name, assessed(a), other.name, assessed(b))
		}
		if b["jingwei_recoverer_counting"] != 0 || assessed(b) != 0 {
			t.Fatalf("%s counts too: counting %v, assessments %v", other.name, b["jingwei_recoverer_counting"], assessed(b))
		}
		return distinct >= 24 && sum == float64(distinct)
	})
	t.Logf("before the freeze: %v assessments counted, %d distinct", sum, distinct)
	frozenSum := sum // the frozen one's series, as last scraped

	// Freeze the counting one: no renewal, no release.
	if err := counter.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 30*time.Second, other.name+" takes the counting over", func() bool {
		b, ok := other.scrape()
		return ok && b["jingwei_recoverer_counting"] == 1
	})
	b, _ := other.scrape()
	base, atTakeover := assessed(b), distinctAssessments(t, js)

	callMany(t, agent, "two", 24)
	streamtest.Eventually(t, 60*time.Second, other.name+" quiet and counting the new calls", func() bool {
		b, ok := other.scrape()
		if !ok || !quiet(b) {
			return false
		}
		d := distinctAssessments(t, js)
		if s := frozenSum + assessed(b); s > float64(d) {
			t.Fatalf("while %s is frozen: sum %v > %d distinct assessments", counter.name, s, d)
		}
		return d >= atTakeover+24 && assessed(b)-base == float64(d-atTakeover)
	})

	// The frozen one runs again, catches up on what it missed and counts
	// none of it.
	if err := counter.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 60*time.Second, "both quiet again, "+counter.name+" not counting", func() bool {
		a, okA := counter.scrape()
		b, okB := other.scrape()
		if !okA || !okB || !quiet(a) || !quiet(b) {
			return false
		}
		d := distinctAssessments(t, js)
		if s := assessed(a) + assessed(b); s > float64(d) {
			t.Fatalf("after the thaw: sum %v > %d distinct assessments (%s %v, %s %v)", s, d, counter.name, assessed(a), other.name, assessed(b))
		}
		return a["jingwei_recoverer_counting"] == 0 && b["jingwei_recoverer_counting"] == 1
	})
	a, _ := counter.scrape()
	if assessed(a) != frozenSum {
		t.Fatalf("%s counted after its lease was lost: %v, was %v", counter.name, assessed(a), frozenSum)
	}
}
