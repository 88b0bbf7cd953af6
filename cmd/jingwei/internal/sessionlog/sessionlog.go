// Package sessionlog reads a session's log for the client commands: the
// way any role may, through the recovery worker's jw.api.history service,
// page after page, decoded and bounded as stream.Load reads it from the
// stream itself; and, for the offline commands, from a JSON Lines file or
// a live server (Source).
package sessionlog

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker/service"
)

// Load reads the session's history through jw.api.history, page after
// page, up to the end the first page reports (what the leader held when
// the read started: later events are left out, as stream.Load leaves
// them), decoded as stream.Load decodes them and refused over lim as it
// refuses it (history_too_large).
func Load(ctx context.Context, cl *service.Client, session string, lim schema.Limits) ([]schema.Event, error) {
	var (
		out   []schema.Event
		bytes int64
		end   uint64
	)
	for from, first := uint64(0), true; ; first = false {
		var p service.HistoryPage
		if err := cl.Request(ctx, service.EndpointHistory, service.HistoryRequest{V: schema.Version, Session: session, FromSeq: from, MaxEvents: service.DefaultHistoryEvents}, &p); err != nil {
			return nil, err
		}
		if first {
			end = p.End
		}
		for _, se := range p.Events {
			if se.Seq > end {
				return out, nil
			}
			if se.Seq < from || len(out) > 0 && se.Seq <= out[len(out)-1].Seq {
				return nil, fmt.Errorf("jw.api.history: seq %d out of order (after %d)", se.Seq, from)
			}
			bytes += int64(len(se.Event) + len(`"seq":,`) + len(strconv.FormatUint(se.Seq, 10)) + 1)
			if len(out)+1 > lim.MaxEvents || bytes > lim.MaxBytes {
				return nil, schema.Errorf(schema.CodeHistoryTooLarge, "session %s is over the history limits (%d events, %d bytes)", session, lim.MaxEvents, lim.MaxBytes)
			}
			ev, err := schema.DecodeEvent(se.Event)
			if err != nil {
				return nil, schema.Errorf(schema.CodeCorruptHistory, "session %s seq %d: %v", session, se.Seq, err)
			}
			ev.Seq = se.Seq
			out = append(out, ev)
		}
		if p.NextSeq > end {
			return out, nil
		}
		if len(p.Events) == 0 || p.NextSeq <= from {
			return nil, fmt.Errorf("jw.api.history: the page from seq %d made no progress (next %d, end %d)", from, p.NextSeq, end)
		}
		from = p.NextSeq
	}
}

// Check refuses a session with no event on its log (unknown_session),
// asking jw.api.history for one event.
func Check(ctx context.Context, cl *service.Client, session string) error {
	var p service.HistoryPage
	if err := cl.Request(ctx, service.EndpointHistory, service.HistoryRequest{V: schema.Version, Session: session, MaxEvents: 1}, &p); err != nil {
		return err
	}
	if p.End == 0 {
		return UnknownSession(session)
	}
	return nil
}

// UnknownSession is the refusal of a session with no event on its log.
func UnknownSession(session string) error {
	return schema.Errorf(schema.CodeUnknownSession, "session %q has no events on the log (check the id: jingwei status lists the open sessions)", session)
}
