package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/tools"
)

func TestConfigDefaultsAndValidation(t *testing.T) {
	c := Config{Exe: "jingwei"}.WithDefaults()
	if c.Mode != ModeCluster || c.Nodes != 3 || c.Replicas != 3 || c.Actions != 1000 || c.Sessions != 40 || c.Duration != time.Minute ||
		c.RecovererKills != 3 || c.NodeKills != 2 || c.Pauses != 2 || c.Partitions != 1 || c.LeaseTTL != 2*time.Second || c.Seed == 0 {
		t.Errorf("defaults: %+v", c)
	}
	q := Config{Exe: "jingwei", Quick: true, Mode: ModeSingle}.WithDefaults()
	if q.Actions != 200 || q.Duration != 25*time.Second || q.Nodes != 1 || q.Replicas != 1 || q.RecovererKills != 2 || q.Pauses != 1 {
		t.Errorf("quick single defaults: %+v", q)
	}
	if e := (Config{Exe: "jingwei", Server: "nats://x", AuthDir: "a"}).WithDefaults(); e.Mode != ModeExternal {
		t.Errorf("a server makes the mode external: %s", e.Mode)
	}
	for name, c := range map[string]Config{
		"no exe":           {},
		"external no auth": {Exe: "j", Server: "nats://x"},
		"server on single": {Exe: "j", Mode: ModeSingle, Server: "nats://x"},
		"two nodes":        {Exe: "j", Nodes: 2},
		"replicas > nodes": {Exe: "j", Replicas: 4},
		"short ttl":        {Exe: "j", LeaseTTL: 500 * time.Millisecond},
		"bad sync":         {Exe: "j", Sync: "sometimes"},
		"kill range":       {Exe: "j", KillEvery: [2]time.Duration{3 * time.Second, time.Second}},
		"republish > 1":    {Exe: "j", Republish: 2},
	} {
		err := c.WithDefaults().validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if name != "no exe" && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if err := (Config{}).WithDefaults().validate(); !errors.Is(err, ErrNoExecutable) {
		t.Errorf("no exe: %v", err)
	}
}

// TestScheduleIsSeeded: the same seed draws the same schedule; node kills
// go round the nodes in turn, cluster faults alternate and are spread over
// the run, a single node gets no node faults.
func TestScheduleIsSeeded(t *testing.T) {
	cfg := Config{Exe: "j", Seed: 99}.WithDefaults()
	a, b := schedule(rand.New(rand.NewPCG(99, 4)), cfg), schedule(rand.New(rand.NewPCG(99, 4)), cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different schedules:\n%v\n%v", a, b)
	}
	kinds := map[string]int{}
	var kills []int
	var last time.Duration
	for _, f := range a {
		kinds[f.Kind]++
		if f.At < last || f.At < 0 || f.At > cfg.Duration {
			t.Errorf("fault %+v out of order or outside the run", f)
		}
		last = f.At
		if f.Kind == "node_kill" {
			kills = append(kills, f.Node)
		}
	}
	if kinds["recoverer_kill"] != 3 || kinds["node_kill"] != 2 || kinds["partition"] != 1 || kinds["pause"] != 2 {
		t.Errorf("kinds %v", kinds)
	}
	if len(kills) == 2 && kills[1] != (kills[0]+1)%3 {
		t.Errorf("node kills %v: not in turn", kills)
	}
	cfg.Mode = ModeSingle
	for _, f := range schedule(rand.New(rand.NewPCG(99, 4)), cfg.WithDefaults()) {
		if f.Kind == "node_kill" || f.Kind == "partition" {
			t.Errorf("single node scheduled %+v", f)
		}
	}
	c := schedule(rand.New(rand.NewPCG(100, 4)), cfg)
	if reflect.DeepEqual(a, c) {
		t.Error("another seed drew the same schedule")
	}
}

func TestWorkload(t *testing.T) {
	w := newWorkload(rand.New(rand.NewPCG(1, 3)), "cxabc", 400, 10, 0.05, 20*time.Second)
	if len(w.actions) != 400 {
		t.Fatalf("%d actions", len(w.actions))
	}
	ids := map[string]bool{}
	tool := map[string]int{}
	again := 0
	for i, a := range w.actions {
		if ids[a.RequestID] || !strings.HasPrefix(a.Session, "cxabc-s") || !strings.HasPrefix(a.Marker, "cxabc-") {
			t.Fatalf("action %+v", a)
		}
		ids[a.RequestID] = true
		tool[a.Tool]++
		var args map[string]any
		if err := json.Unmarshal(w.args[i], &args); err != nil {
			t.Fatal(err)
		}
		field := "customer"
		if a.Tool == tools.PaymentsCharge {
			field = "account"
		}
		if args[field] != a.Marker {
			t.Errorf("%s: the marker is not in the %s argument: %s", a.ID, field, w.args[i])
		}
	}
	var prev time.Duration
	first := map[int]bool{}
	for _, p := range w.pubs {
		if p.At < prev || p.At > 20*time.Second {
			t.Fatalf("publication %+v out of order", p)
		}
		prev = p.At
		if p.Again {
			again++
			if !first[p.Action] {
				t.Errorf("action %d published again before its first publish", p.Action)
			}
		} else {
			first[p.Action] = true
			if !p.MsgID {
				t.Errorf("a first publish without Nats-Msg-Id: %+v", p)
			}
		}
	}
	if tool[tools.OrdersCreate] < 150 || tool[tools.PaymentsCharge] < 150 {
		t.Errorf("tools %v: not about half each", tool)
	}
	if again < 8 || again > 40 {
		t.Errorf("%d republished of 400, want about 20", again)
	}
}

// TestProxyCutAndHeal: bytes flow through the proxy, a cut closes the
// open connection and refuses new ones, a heal lets them through again.
func TestProxyCutAndHeal(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	p, err := newProxy(echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	roundTrip := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		b := make([]byte, 4)
		_, err := io.ReadFull(c, b)
		return err
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Cut()
	if err := roundTrip(c); err == nil {
		t.Fatal("an open connection survived the cut")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		if err := roundTrip(c2); err == nil {
			t.Fatal("a new connection got through a cut proxy")
		}
		c2.Close()
	}
	p.Heal()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := roundTrip(c3); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}

func TestNodeConfigArgs(t *testing.T) {
	w, err := newNetwork(3)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cfg := w.nodeConfig(1, "/d", "/a")
	args := cfg.Args()
	if args[0] != "chaos" || args[1] != "node" || len(cfg.Routes) != 2 || cfg.ClusterAdvertise != w.hole.Addr() {
		t.Errorf("args %v, config %+v", args, cfg)
	}
	for _, r := range cfg.Routes {
		if strings.Contains(r, ":"+strconv.Itoa(w.route[0])) || strings.Contains(r, ":"+strconv.Itoa(w.route[2])) {
			t.Errorf("route %s dials a node directly, not its proxy", r)
		}
	}
	if single := newSingle(t).nodeConfig(0, "/d", "/a"); single.ClusterName != "" || len(single.Args()) != 10 {
		t.Errorf("single node: %+v %v", single, single.Args())
	}
}

func newSingle(t *testing.T) *network {
	w, err := newNetwork(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func TestReportTableAndJSON(t *testing.T) {
	rep := &Report{Seed: 7, Mode: ModeSingle, Label: "single node", Config: ReportConfig{Actions: 10, Sessions: 2, Workers: 1, LeaseTTL: 2},
		Rows: []Row{
			zeroRow(rowDoubleCharges, 1, []string{"s/r"}, ""),
			infoRow(rowRepeated, 2, nil, ""),
			{Name: rowLatency + " p99", Value: math.NaN(), Unit: "s", Target: "<= 3s"},
		}}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"seed 7", "invariant", "double charges", "false (reported)", "examples:", "s/r"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	buf.Reset()
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Seed int64 `json:"seed"`
		Rows []struct {
			Invariant string   `json:"invariant"`
			Value     *float64 `json:"value"`
			Must      bool     `json:"must"`
			Met       bool     `json:"met"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("JSON: %v\n%s", err, buf.String())
	}
	if back.Seed != 7 || len(back.Rows) != 3 || back.Rows[0].Value == nil || *back.Rows[0].Value != 1 || !back.Rows[0].Must || back.Rows[2].Value != nil {
		t.Errorf("JSON rows %+v", back)
	}
	if err := rep.Err(); !errors.Is(err, ErrInvariantFailed) || !strings.Contains(err.Error(), rowDoubleCharges) || strings.Contains(err.Error(), rowRepeated) {
		t.Errorf("Err: %v", err)
	}
	rep.Rows = rep.Rows[1:]
	if err := rep.Err(); err != nil {
		t.Errorf("only reported rows failed: %v", err)
	}
}

func TestConcurrentPreparesAgree(t *testing.T) {
	for _, tt := range []struct {
		codes, ids [3]string
		ok         bool
	}{
		{[3]string{"plan", "plan", "plan"}, [3]string{"p", "p", "p"}, true},
		{[3]string{"plan", "superseded_call", "plan"}, [3]string{"p", "", "p"}, true},
		{[3]string{"plan", "plan", "plan"}, [3]string{"p", "q", "p"}, false},
		{[3]string{"internal", "plan", "plan"}, [3]string{"", "p", "p"}, false},
		{[3]string{"superseded_call", "superseded_call", "superseded_call"}, [3]string{}, false},
		{[3]string{"plan", "timeout", "plan"}, [3]string{"p", "", "p"}, false},
	} {
		if got := groupAgrees(tt.codes, tt.ids); got != tt.ok {
			t.Errorf("%v %v: %v, want %v", tt.codes, tt.ids, got, tt.ok)
		}
	}
}
