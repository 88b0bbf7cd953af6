package recoverer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/service"
)

// historySlack is what a jw.api.history answer keeps free of its byte
// bound below the connection's max_payload: the page's own members
// (session, next_seq, end) and the array's brackets.
const historySlack = 1024

// History answers one page of a session's log (jw.api.history): the
// events from req.FromSeq on, each as stored, up to req.MaxEvents
// (service.DefaultHistoryEvents when 0) and as many bytes as one answer
// carries below the server's max_payload, read from the stream leader's
// view (stream.Logs.ReadLog) up to End, the last sequence the leader
// held for the session when the page was read.
//
// A tenant-scoped agent (service.Caller(ctx) is its tenant) reads its own
// sessions only: another tenant's session, or one of no tenant, is
// forbidden before anything is read. Every other caller (the fleet-wide
// roles, the trusted account) reads any session. A request that is not
// version 1, names no valid session or asks for more than
// service.MaxHistoryEvents is bad_request; an event that does not decode
// is corrupt_history naming its seq, one too large for any answer
// history_too_large.
func (r *Recoverer) History(ctx context.Context, req service.HistoryRequest) (service.HistoryPage, error) {
	if req.V != schema.Version {
		return service.HistoryPage{}, schema.Errorf(schema.CodeBadRequest, "v %d: want %d", req.V, schema.Version)
	}
	if err := stream.ValidateSession(req.Session); err != nil {
		return service.HistoryPage{}, schema.Errorf(schema.CodeBadRequest, "%v", err)
	}
	if err := service.CheckSession(ctx, req.Session); err != nil {
		return service.HistoryPage{}, err
	}
	if req.MaxEvents < 0 || req.MaxEvents > service.MaxHistoryEvents {
		return service.HistoryPage{}, schema.Errorf(schema.CodeBadRequest, "max_events %d: want 0 to %d", req.MaxEvents, service.MaxHistoryEvents)
	}
	if req.MaxEvents == 0 {
		req.MaxEvents = service.DefaultHistoryEvents
	}
	return historyPage(ctx, r.t, req, int(r.t.JS.Conn().MaxPayload())-historySlack)
}

// historyPage reads the page of req (checked, MaxEvents set) with at most
// budget bytes of encoded events.
func historyPage(ctx context.Context, t *stream.Topology, req service.HistoryRequest, budget int) (service.HistoryPage, error) {
	page := service.HistoryPage{Session: req.Session, Events: []service.StoredEvent{}, NextSeq: max(req.FromSeq, 1)}
	var (
		used int
		bad  error
	)
	end, err := t.Logs().ReadLog(ctx, req.Session, req.FromSeq, func(seq uint64, data []byte) bool {
		if _, err := schema.DecodeEvent(data); err != nil {
			bad = storedEventError(req.Session, seq, err)
			return false
		}
		// {"seq":N,"event":…}, and a comma: the event goes out as stored
		// (encodeHistoryPage), or shorter if it was not compact.
		size := len(data) + len(`{"seq":,"event":},`) + len(strconv.FormatUint(seq, 10))
		if used+size > budget {
			if len(page.Events) == 0 {
				bad = schema.Errorf(schema.CodeHistoryTooLarge, "session %s seq %d: the event (%d bytes) is larger than one answer carries (%d bytes)", req.Session, seq, size, budget)
			}
			return false
		}
		used += size
		page.Events = append(page.Events, service.StoredEvent{Seq: seq, Event: data})
		page.NextSeq = seq + 1
		return len(page.Events) < req.MaxEvents
	})
	if err != nil {
		return service.HistoryPage{}, err
	}
	if bad != nil {
		return service.HistoryPage{}, bad
	}
	page.End = end
	return page, nil
}

// encodeHistoryPage encodes page as jw.api.history answers it: the events
// byte for byte as stored (a compact event; json.Marshal would escape <,
// > and & in its strings).
func encodeHistoryPage(page service.HistoryPage) (service.RawAnswer, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(page); err != nil {
		return nil, fmt.Errorf("recoverer: encode history page: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// storedEventError is err, an event that does not decode, as a
// *schema.Error naming the session and seq (corrupt_history unless the
// decoder gave a code of its own).
func storedEventError(session string, seq uint64, err error) error {
	if se, ok := err.(*schema.Error); ok {
		return &schema.Error{Code: se.Code, Message: "session " + session + " seq " + strconv.FormatUint(seq, 10) + ": " + se.Message}
	}
	return schema.Errorf(schema.CodeCorruptHistory, "session %s seq %d: %v", session, seq, err)
}
