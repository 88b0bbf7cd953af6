// Package statustable renders what jingwei status shows: the status of
// the recovery worker (jw.api.status) and the retry plans, as the aligned
// tables an operator reads.
package statustable

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/service"
)

// View is what status prints with --json: the service's status and the
// plans.
type View struct {
	Status service.Status `json:"status"`
	// Plans are the plans in jw_plans (of --session, if given), newest
	// first.
	Plans []stream.PlanRecord `json:"plans"`
}

// Print writes v as aligned tables: the open calls, the calls awaiting
// review, the calls awaiting approval and the stopped tasks, the plans,
// and the reviews of one call when v has them.
func Print(w io.Writer, v View) {
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
	printApprovals(tw, st)
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

// printApprovals writes the calls waiting for approval and the stopped
// tasks of a status.
func printApprovals(tw io.Writer, st service.Status) {
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "AWAITING APPROVAL (%d)\n", len(st.AwaitingApproval))
	if len(st.AwaitingApproval) > 0 {
		fmt.Fprintln(tw, "SESSION\tCALL\tTOOL\tTASK\tDEADLINE\tSEQ")
		for _, a := range st.AwaitingApproval {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", a.Session, a.CallID, a.Tool, orDash(a.Task), a.Deadline.Format(time.RFC3339), a.Seq)
		}
	}
	if len(st.StoppedTasks) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "STOPPED TASKS (%d)\n", len(st.StoppedTasks))
		fmt.Fprintln(tw, "SESSION\tTASK\tBY\tREASON\tAT")
		for _, s := range st.StoppedTasks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Session, s.Task, s.By, orDash(s.Reason), s.At.Format(time.RFC3339))
		}
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

// orDash returns s, or "-" when it is blank.
func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

// yesNo spells b.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
