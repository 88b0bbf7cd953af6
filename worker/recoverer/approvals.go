package recoverer

import (
	"context"
	"sort"
	"sync"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker/service"
)

// approvalTrack is what the classifier keeps of approvals and stopped
// tasks for jw.api.status: the calls waiting for approval (from their
// approval.requested until approval.granted or a result) and the stopped
// tasks, per session. Memory follows waiting calls and stopped tasks.
// Safe for concurrent use.
type approvalTrack struct {
	mu      sync.Mutex
	waiting map[string]map[string]service.WaitingApproval // session → call → waiting
	// calls holds the tool and task of every open call that may still ask
	// for approval (until its start, approval or result). Flat: a map per
	// session, emptied and made again with every call, was most of the
	// classifier's map work.
	calls   map[callKey]callInfo
	stopped map[string]map[string]service.StoppedTask // session → task → stop
	// timedOut, when set, is told of a waiting call rejected at stage
	// approval at or after its deadline.
	timedOut func(session, callID string)
}

type callInfo struct{ tool, task string }

type callKey struct{ session, callID string }

func newApprovalTrack() *approvalTrack {
	return &approvalTrack{waiting: map[string]map[string]service.WaitingApproval{}, calls: map[callKey]callInfo{}, stopped: map[string]map[string]service.StoppedTask{}}
}

// observe applies one decoded event of session at seq.
func (a *approvalTrack) observe(session string, seq uint64, ev *schema.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch ev.Type {
	case schema.TypeCall:
		if ev.Call.Operation != nil && !ev.Call.Started { // a call recorded as started never asks
			a.calls[callKey{session, ev.Call.CallID}] = callInfo{tool: ev.Call.Tool, task: ev.Call.Operation.Task}
		}
	case schema.TypeStarted:
		delete(a.calls, callKey{session, ev.Started.CallID})
	case schema.TypeApprovalRequested:
		c := a.calls[callKey{session, ev.ApprovalRequest.CallID}]
		put(a.waiting, session, ev.ApprovalRequest.CallID, service.WaitingApproval{Session: session, CallID: ev.ApprovalRequest.CallID,
			Tool: c.tool, Task: c.task, Deadline: ev.ApprovalRequest.Deadline, Seq: seq})
	case schema.TypeApprovalGranted:
		del(a.waiting, session, ev.Approval.CallID)
		delete(a.calls, callKey{session, ev.Approval.CallID})
	case schema.TypeResult:
		if w, ok := a.waiting[session][ev.Result.CallID]; ok && a.timedOut != nil &&
			ev.Result.Status == schema.StatusRejected && ev.Result.Stage == schema.StageApproval && !ev.At.Before(w.Deadline) {
			a.timedOut(session, ev.Result.CallID)
		}
		del(a.waiting, session, ev.Result.CallID)
		delete(a.calls, callKey{session, ev.Result.CallID})
	case schema.TypeTaskStopped:
		put(a.stopped, session, ev.Stop.Task, service.StoppedTask{Session: session, Task: ev.Stop.Task, By: ev.Stop.By, Reason: ev.Stop.Reason, At: ev.At, Seq: seq})
	}
}

func put[V any](m map[string]map[string]V, s, k string, v V) {
	if m[s] == nil {
		m[s] = map[string]V{}
	}
	m[s][k] = v
}

func del[V any](m map[string]map[string]V, s, k string) {
	if inner := m[s]; inner != nil {
		delete(inner, k)
		if len(inner) == 0 {
			delete(m, s)
		}
	}
}

// list returns what the classifier saw, for one session or all.
func (a *approvalTrack) list(session string) ([]service.WaitingApproval, []service.StoppedTask) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, st := []service.WaitingApproval{}, []service.StoppedTask{}
	for s, calls := range a.waiting {
		if session == "" || s == session {
			for _, c := range calls {
				w = append(w, c)
			}
		}
	}
	for s, tasks := range a.stopped {
		if session == "" || s == session {
			for _, t := range tasks {
				st = append(st, t)
			}
		}
	}
	return w, st
}

// approvalStatus fills the calls waiting for approval and the stopped
// tasks of a status answer: for one session from its log as it is now
// (exact, whatever the classifier saw since a restart), for all from what
// the classifier tracked.
func (r *Recoverer) approvalStatus(ctx context.Context, session string, st *service.Status) error {
	if session == "" {
		st.AwaitingApproval, st.StoppedTasks = r.classify.track.approvals.list("")
	} else {
		h, err := r.cfg.Topology.Logs().Load(ctx, session)
		if err != nil {
			return err
		}
		ap := recovery.ApprovalsOf(h)
		st.AwaitingApproval, st.StoppedTasks = []service.WaitingApproval{}, []service.StoppedTask{}
		for _, p := range ap.Pending {
			st.AwaitingApproval = append(st.AwaitingApproval, service.WaitingApproval{Session: session, CallID: p.CallID, Tool: p.Tool, Task: p.Task, Deadline: p.Deadline, Seq: p.Seq})
		}
		for i := range h {
			if s := h[i].Stop; s != nil {
				if _, dup := ap.Stopped[s.Task]; dup {
					st.StoppedTasks = append(st.StoppedTasks, service.StoppedTask{Session: session, Task: s.Task, By: s.By, Reason: s.Reason, At: h[i].At, Seq: h[i].Seq})
					delete(ap.Stopped, s.Task)
				}
			}
		}
	}
	sort.Slice(st.AwaitingApproval, func(i, j int) bool {
		a, b := st.AwaitingApproval[i], st.AwaitingApproval[j]
		return a.Session < b.Session || a.Session == b.Session && a.Seq < b.Seq
	})
	sort.Slice(st.StoppedTasks, func(i, j int) bool {
		a, b := st.StoppedTasks[i], st.StoppedTasks[j]
		return a.Session < b.Session || a.Session == b.Session && a.Seq < b.Seq
	})
	return nil
}
