package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/service"
)

func init() {
	register(command{name: "status", summary: "show open calls, calls awaiting review and retry plans", run: runStatus})
}

const statusHelp = `  jingwei status [--session S [--call ID]] [--json] [--watch [--interval D]]

Asks the recovery worker (jw.api.status) for the calls that are open (a
tool.call without its tool.result yet) and the calls awaiting a review
(needs_review, no plan issued since), and reads the retry plans in jw_plans
(issued: waiting for a tool worker to run them; consumed: used by an
attempt). --session limits everything to one session; --call ID (with
--session) also lists the call's reviews, each with where it came from (a
person, or a probe and which), its key and how the recovery worker judges it.

A call awaiting review whose evidence is no_result, timeout or cancelled was
closed without its body's own answer: the tool worker that ran it may STILL
BE RUNNING its body (a frozen process resumes after a takeover), and the
table says so (WRITER: may run). Before signing not_executed for it, fence
what the call writes (or confirm the process is gone) and only then check
the business system: see 'jingwei help review' and docs/protocol.md §10.

Output: three aligned tables; --json prints one JSON object
{"status":{…jw.api.status…},"plans":[…]}. --watch refreshes every --interval
until interrupted (Ctrl-C); with --json it prints one object per refresh.

Exit status: 0 success; 1 no service answers; 2 usage; 3 refused
({"error":{…}} on stdout: unknown_session for a --session with no event on
its log, bad_request, permission_denied); 4 the server is unreachable (it
did not accept the connection within 2 s; code unreachable).`

// statusView is what status prints with --json.
type statusView struct {
	Status service.Status `json:"status"`
	// Plans are the plans in jw_plans (of --session, if given), newest
	// first.
	Plans []stream.PlanRecord `json:"plans"`
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("status", "Show open calls, calls awaiting review and retry plans.", statusHelp, stderr)
	var cf clientFlags
	cf.register(fs, 10*time.Second)
	session := fs.String("session", "", "only this session (default: all)")
	call := fs.String("call", "", "with --session: also list the call's reviews and where each came from (a person or a probe)")
	asJSON := fs.Bool("json", false, "print JSON")
	watch := fs.Bool("watch", false, "refresh until interrupted")
	interval := fs.Duration("interval", 2*time.Second, "refresh interval with --watch")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if *session != "" {
		if err := stream.ValidateSession(*session); err != nil {
			return usageError(stderr, "status", "--session: %v", err)
		}
	}
	if *call != "" && *session == "" {
		return usageError(stderr, "status", "--call needs --session")
	}
	if *interval <= 0 {
		return usageError(stderr, "status", "--interval must be positive")
	}
	if _, err := cf.log.logger(stderr); err != nil {
		return usageError(stderr, "status", "%v", err)
	}
	api, err := cf.connect(ctx, "status", stderr)
	if err != nil {
		return printError(stdout, err)
	}
	defer api.Close()

	if *session != "" {
		if err := checkSession(ctx, api, *session); err != nil {
			return printError(stdout, err)
		}
	}
	clear := *watch && !*asJSON && isTerminal(stdout)
	for {
		v, err := loadStatus(ctx, api, *session, *call)
		if err != nil {
			if ctx.Err() != nil && *watch {
				return exitOK
			}
			return printError(stdout, err)
		}
		if *asJSON {
			_ = writeJSON(stdout, v)
		} else {
			if clear {
				fmt.Fprint(stdout, "\033[H\033[2J")
			}
			if *watch {
				fmt.Fprintf(stdout, "jingwei status at %s (every %s, Ctrl-C to stop)\n\n", time.Now().Format(time.TimeOnly), *interval)
			}
			printStatus(stdout, v)
		}
		if !*watch {
			return exitOK
		}
		t := time.NewTimer(*interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return exitOK
		case <-t.C:
		}
		if !clear && !*asJSON {
			fmt.Fprintln(stdout)
		}
	}
}

// loadStatus asks the service for its status and reads the plans.
func loadStatus(ctx context.Context, api *apiClient, session, call string) (statusView, error) {
	var v statusView
	st, err := api.Status(ctx, service.StatusRequest{Session: session, CallID: call})
	if err != nil {
		return v, err
	}
	v.Status = st
	plans, err := listPlans(ctx, api, session)
	if err != nil {
		return v, err
	}
	v.Plans = plans
	return v, nil
}

// listPlans reads every plan record in <prefix>_plans, of one session or
// all, newest first.
func listPlans(ctx context.Context, api *apiClient, session string) ([]stream.PlanRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, api.timeout)
	defer cancel()
	js, err := jetstream.New(api.nc)
	if err != nil {
		return nil, err
	}
	topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{Prefix: api.prefix})
	if err != nil {
		return nil, err
	}
	return topo.Plans().ListPlans(ctx, session)
}

// printStatus prints the three tables.
func printStatus(w io.Writer, v statusView) {
	st := v.Status
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "OPEN CALLS (%d)\n", len(st.OpenCalls))
	if len(st.OpenCalls) > 0 {
		fmt.Fprintln(tw, "SESSION\tCALL\tTOOL\tEFFECT\tTASK\tSTARTED\tEPOCH\tSEQ")
		for _, c := range st.OpenCalls {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", c.Session, c.CallID, c.Tool, orDash(c.Contract.Effect.String()), orDash(c.Task), yesNo(c.Started), c.Epoch, c.Seq)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "AWAITING REVIEW (%d)\n", len(st.AwaitingReview))
	if len(st.AwaitingReview) > 0 {
		fmt.Fprintln(tw, "SESSION\tCALL\tTOOL\tEFFECT\tOUTCOME\tEVIDENCE\tATTEMPTS\tWRITER")
		mayRun := 0
		for _, a := range st.AwaitingReview {
			writer := "done"
			if recovery.WriterMayRun(a.Evidence) {
				writer, mayRun = "may run", mayRun+1
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", a.Session, a.CallID, a.Tool, orDash(a.Contract.Effect.String()), a.Outcome, a.Evidence, a.Attempts, writer)
		}
		if mayRun > 0 {
			fmt.Fprintf(tw, "(%d with WRITER \"may run\": the body may still be running; fence its store before checking it, see 'jingwei help review')\n", mayRun)
		}
	}
	printApprovalStatus(tw, st)
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "PLANS (issued %d, consumed %d)\n", st.Plans.Issued, st.Plans.Consumed)
	if len(v.Plans) > 0 {
		fmt.Fprintln(tw, "PLAN\tSESSION\tTOOL\tRETRIES\tBASIS\tREVIEW BY\tSTATE\tCONSUMED BY")
		for _, p := range v.Plans {
			by := "-"
			if rv := p.Plan.Review; rv != nil {
				by = reviewFrom(*rv)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Plan.PlanID, p.Plan.Session, p.Plan.Tool, p.Plan.PriorCallID, p.Plan.Basis, by, p.State, orDash(p.ConsumedBy))
		}
	}
	if len(st.Reviews) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "REVIEWS OF %s (%d)\n", st.Reviews[0].Review.CallID, len(st.Reviews))
		fmt.Fprintln(tw, "SEQ\tVERDICT\tFROM\tKEY\tJUDGED\tEVIDENCE")
		for _, c := range st.Reviews {
			judged := "accepted"
			switch {
			case !c.Accepted:
				judged = "ignored: " + c.Code
			case c.Review.Automated() && c.Review.Verdict == schema.VerdictUncertain:
				judged = "evidence only"
			case c.Decides:
				judged = "decides"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", c.Seq, c.Review.Verdict, reviewFrom(c.Review), orDash(c.Review.Signer), judged, c.Review.Evidence)
		}
	}
	tw.Flush()
	if st.Stats.EventsSeen > 0 || st.Stats.OpenCalls > 0 {
		fmt.Fprintf(w, "\nrecovery worker: %d events classified, %d calls open\n", st.Stats.EventsSeen, st.Stats.OpenCalls)
	}
}

// reviewFrom says where a review came from: "probe <name>" or "person
// <operator>".
func reviewFrom(r schema.Review) string {
	if r.Automated() {
		return "probe " + r.Probe
	}
	return "person " + r.Operator
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// checkSession refuses a session with no event on its log
// (unknown_session), read through jw.api.history as any role may.
func checkSession(ctx context.Context, api *apiClient, session string) error {
	var p service.HistoryPage
	if err := api.Request(ctx, service.EndpointHistory, service.HistoryRequest{V: schema.Version, Session: session, MaxEvents: 1}, &p); err != nil {
		return err
	}
	if p.End == 0 {
		return unknownSession(session)
	}
	return nil
}
