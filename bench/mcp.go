package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/catalog"
	"github.com/jingwei/jingwei/worker/mcpserver"
	"github.com/jingwei/jingwei/worker/service"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// Issue 25's targets for a no-op MCP tool called through 'jingwei mcp'
// (an MCP client → jingwei's MCP server → jw.api.call → a tool worker →
// the tool's MCP server) against an MCP client calling the same server
// directly: at most 3 ms added to the p50 and 15 ms to the p99, and with
// 16 clients at least half the direct calls/s.
var (
	mcpAddedP50 = Target{Check: AddedAtMost, Limit: 3}
	mcpAddedP99 = Target{Check: AddedAtMost, Limit: 15}
	mcpRate     = Target{Check: RatioAtLeast, Limit: 0.5}
	// mcpCPU is what the rate target asks of a CPU-bound run (every
	// process of both sides is this one): at most twice the CPU per call.
	// Less noisy than calls/s on a shared machine.
	mcpCPU = Target{Check: RatioAtMost, Limit: 2, Text: "ratio <= 2 (calls/s >= 0.5 when CPU-bound)"}
)

// mcpClients is the "many clients" side: MCP clients at once, each with a
// session (and a connection pool) of its own.
const mcpClients = 16

func mcpStep(cfg Config) step {
	calls1, calls16 := cfg.n(300, 100, 10), cfg.n(40, 20, 3)
	const m = "(sync=interval)"
	rows := []row{
		{"mcp call via jingwei mcp, 1 client: p50 ms (raw: MCP client → server direct) " + m, mcpAddedP50},
		{"mcp call via jingwei mcp, 1 client: p99 ms (raw: direct) " + m, mcpAddedP99},
		{fmt.Sprintf("mcp call via jingwei mcp, %d clients: calls/s vs direct %s", mcpClients, m), mcpRate},
		{fmt.Sprintf("mcp call via jingwei mcp, %d clients: p50 ms (raw: direct) %s", mcpClients, m), mcpAddedP50},
		{fmt.Sprintf("mcp call via jingwei mcp, %d clients: p99 ms (raw: direct) %s", mcpClients, m), mcpAddedP99},
		{fmt.Sprintf("mcp call via jingwei mcp, %d clients: CPU ms per call, all processes (raw: direct) %s", mcpClients, m), mcpCPU},
	}
	return step{scenario: "mcp", name: "MCP call through jingwei mcp vs direct " + m, server: natsnode.SyncInterval, rows: rows,
		run: func(ctx context.Context, e *env) ([]Result, error) {
			f, err := e.mcp(ctx, calls1, calls16)
			if err != nil {
				return nil, err
			}
			return []Result{
				NewResult(rows[0].name, Percentile(f.lat1, 50), Percentile(f.raw1, 50), "ms", rows[0].target),
				NewResult(rows[1].name, Percentile(f.lat1, 99), Percentile(f.raw1, 99), "ms", rows[1].target),
				NewResult(rows[2].name, Median(f.rate16), Median(f.rawRate16), "calls/s", rows[2].target),
				NewResult(rows[3].name, Percentile(f.lat16, 50), Percentile(f.raw16, 50), "ms", rows[3].target),
				NewResult(rows[4].name, Percentile(f.lat16, 99), Percentile(f.raw16, 99), "ms", rows[4].target),
				NewResult(rows[5].name, Median(f.cpu16), Median(f.rawCPU16), "ms", rows[5].target),
			}, nil
		}}
}

// mcpFigures is what the MCP step measured: the pipeline's figures (lat1,
// raw1, lat16, raw16, rate16, rawRate16) and the CPU ms per call with
// mcpClients clients, per round.
type mcpFigures struct {
	pipelineFigures
	cpu16, rawCPU16 []float64
}

// mcpNoopServer is the tools' MCP server: the Go SDK's, one tool "noop"
// that answers {"ok":true}, over streamable HTTP on a loopback port.
func mcpNoopServer() (url string, stop func(), err error) {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench-noop", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "noop", Description: "answers ok", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, map[string]any, error) {
			return nil, map[string]any{"ok": true}, nil
		})
	return serveLoopback(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
}

// serveLoopback serves h on a fresh loopback port.
func serveLoopback(h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = hs.Close() }, nil
}

// mcpClient is one MCP client with a connection pool of its own (an agent
// process of its own), connected to url.
func mcpClient(ctx context.Context, url string) (*mcp.ClientSession, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	c := mcp.NewClient(&mcp.Implementation{Name: "bench-agent", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: tr}, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
}

// mcpCall calls tool once on s and adds its latency to into.
func (p *pipelineFigures) mcpCall(ctx context.Context, s *mcp.ClientSession, tool string, into *[]float64) error {
	t0 := time.Now()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
	if err != nil {
		return fmt.Errorf("mcp %s: %w", tool, err)
	}
	if res.IsError {
		var text []string
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				text = append(text, t.Text)
			}
		}
		return fmt.Errorf("mcp %s: tool error: %s", tool, strings.Join(text, " "))
	}
	p.add(into, time.Since(t0))
	return nil
}

// mcpStack is what the jingwei side runs: the tool worker and jingwei's MCP
// server (each on a NATS connection of its own, as the processes
// 'jingwei worker --tools' and 'jingwei mcp' would be).
type mcpStack struct {
	direct, jingwei string // MCP endpoints
	stops           []func()
}

func (s *mcpStack) stop() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}

func (e *env) startMCPStack(ctx context.Context, topo *stream.Topology) (_ *mcpStack, err error) {
	st := &mcpStack{}
	defer func() {
		if err != nil {
			st.stop()
		}
	}()
	url, stopBackend, err := mcpNoopServer()
	if err != nil {
		return nil, err
	}
	st.direct = url
	st.stops = append(st.stops, stopBackend)
	cat, err := catalog.Parse([]byte("version: 1\nservers:\n  bench: {url: \"" + url + "\"}\ntools:\n" +
		"  - name: bench.noop\n    mcp: {server: bench, tool: noop}\n    contract: {effect: read_only, revision: noop-v1}\n"))
	if err != nil {
		return nil, err
	}
	set := catalog.Open(cat, e.log)
	st.stops = append(st.stops, set.Close)
	list, err := set.Tools(ctx, nil)
	if err != nil {
		return nil, err
	}
	reg, err := worker.NewRegistry(list...)
	if err != nil {
		return nil, err
	}
	wnc, err := e.srv.Connect()
	if err != nil {
		return nil, err
	}
	st.stops = append(st.stops, wnc.Close)
	wjs, err := jetstream.New(wnc)
	if err != nil {
		return nil, err
	}
	wtopo, err := stream.OpenTopology(ctx, wjs, topo.Config())
	if err != nil {
		return nil, err
	}
	tw, err := toolworker.New(toolworker.Config{Topology: wtopo, Registry: reg, Logger: e.log})
	if err != nil {
		return nil, err
	}
	wctx, stopWorker := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tw.Run(wctx) }()
	st.stops = append(st.stops, func() { stopWorker(); <-done })
	if err := waitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		return len(tw.OwnedPartitions()) == topo.Names().Partitions(), nil
	}); err != nil {
		return nil, err
	}
	mnc, err := e.srv.Connect()
	if err != nil {
		return nil, err
	}
	st.stops = append(st.stops, mnc.Close)
	caller := service.NewClient(mnc, service.ClientConfig{Prefix: topo.Prefix, Timeout: 30 * time.Second})
	jurl, stopJingwei, err := serveLoopback(mcpserver.HTTP(mcpserver.New(mcpserver.Config{Caller: caller, Tools: list}), nil))
	if err != nil {
		return nil, err
	}
	st.jingwei = jurl
	st.stops = append(st.stops, stopJingwei)
	// The gateway answers a moment after the worker owns its partitions.
	warm, err := mcpClient(ctx, jurl)
	if err != nil {
		return nil, err
	}
	defer warm.Close()
	var p pipelineFigures
	var last error
	wctx2, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := waitFor(wctx2, 20*time.Millisecond, func() (bool, error) {
		last = p.mcpCall(wctx2, warm, "bench.noop", new([]float64))
		return last == nil, nil
	}); err != nil {
		return nil, errors.Join(err, last)
	}
	return st, nil
}

// mcp measures, in rounds that rotate the sides, a no-op MCP tool called
// through jingwei's MCP server against MCP clients calling the tool's
// server directly: one client, then mcpClients clients at once. Every
// round connects fresh clients (so jingwei's sessions are fresh too);
// connecting is not timed.
func (e *env) mcp(ctx context.Context, calls1, calls16 int) (*mcpFigures, error) {
	topo, err := e.topology(ctx, e.prefix("mcp"))
	if err != nil {
		return nil, err
	}
	defer e.drop(topo)
	st, err := e.startMCPStack(ctx, topo)
	if err != nil {
		return nil, err
	}
	defer st.stop()
	p := &mcpFigures{}
	// side runs n clients of url calling tool calls times each and returns
	// the calls/s of the timed part; the CPU ms per call (every part of
	// both sides runs in this process) go to cpu.
	side := func(url, tool string, n, calls int, lat, cpu *[]float64) func(ctx context.Context, round int) (float64, error) {
		return func(ctx context.Context, round int) (float64, error) {
			ss := make([]*mcp.ClientSession, n)
			defer func() {
				for _, s := range ss {
					if s != nil {
						_ = s.Close()
					}
				}
			}()
			for i := range ss {
				var err error
				if ss[i], err = mcpClient(ctx, url); err != nil {
					return 0, err
				}
			}
			cpu0 := processCPU()
			d, err := concurrently(ctx, n, func(ctx context.Context, c int) error {
				for range calls {
					if err := p.mcpCall(ctx, ss[c], tool, lat); err != nil {
						return err
					}
				}
				return nil
			})
			if cpu0 >= 0 {
				*cpu = append(*cpu, float64(processCPU()-cpu0)/float64(time.Millisecond)/float64(n*calls))
			}
			return rate(n*calls, d), err
		}
	}
	var none []float64
	if _, err := rotate(ctx, e.cfg.Rounds, side(st.jingwei, "bench.noop", 1, calls1, &p.lat1, &none), side(st.direct, "noop", 1, calls1, &p.raw1, &none)); err != nil {
		return nil, err
	}
	rates, err := rotate(ctx, e.cfg.Rounds, side(st.jingwei, "bench.noop", mcpClients, calls16, &p.lat16, &p.cpu16), side(st.direct, "noop", mcpClients, calls16, &p.raw16, &p.rawCPU16))
	if err != nil {
		return nil, err
	}
	p.rate16, p.rawRate16 = rates[0], rates[1]
	return p, nil
}
