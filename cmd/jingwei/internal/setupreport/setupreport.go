// Package setupreport says what jingwei setup put in place: the streams
// and buckets of the topology, the stream identities it confirmed and the
// protected streams that were replaced behind its back.
package setupreport

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
)

// Output is what setup prints with --json.
type Output struct {
	Prefix  string   `json:"prefix"`
	Server  string   `json:"server"`
	Streams []Stream `json:"streams"`
	Buckets []string `json:"buckets"`
	// Confirmed are the identities --confirm-replaced recorded.
	Confirmed []stream.StreamIdentity `json:"confirmed,omitempty"`
	// Replaced are the protected streams that do not match their recorded
	// identity (exit status 1).
	Replaced []stream.IdentityProblem `json:"replaced,omitempty"`
}

// Stream is one stream of the topology in Output.
type Stream struct {
	Name     string   `json:"name"`
	Subjects []string `json:"subjects"`
	Replicas int      `json:"replicas"`
}

// Describe confirms the identities of the streams named in confirm (each
// value may list several, comma-separated), compares every protected
// stream with its recorded identity, and lists the topology's streams and
// buckets. server is the server's URL as it may be shown.
func Describe(ctx context.Context, topo *stream.Topology, server string, replicas int, confirm []string) (Output, error) {
	out := Output{Prefix: topo.Prefix, Server: server}
	var err error
	if out.Confirmed, out.Replaced, err = checkIdentity(ctx, topo, replicas, confirm); err != nil {
		return out, err
	}
	for _, s := range []jetstream.Stream{topo.Events, topo.Requests, topo.Reviews, topo.PlanLog, topo.Assessments, topo.AnswerLog} {
		c := s.CachedInfo().Config
		out.Streams = append(out.Streams, Stream{Name: c.Name, Subjects: c.Subjects, Replicas: max(c.Replicas, 1)})
	}
	for _, b := range []string{"leases", "plans", "budget"} {
		out.Buckets = append(out.Buckets, topo.Prefix+"_"+b)
	}
	return out, nil
}

// checkIdentity confirms the streams named in confirm, then compares every
// protected stream with its recorded identity.
func checkIdentity(ctx context.Context, topo *stream.Topology, replicas int, confirm []string) ([]stream.StreamIdentity, []stream.IdentityProblem, error) {
	var names []string
	for _, c := range confirm {
		for _, n := range strings.Split(c, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
	}
	var confirmed []stream.StreamIdentity
	if len(names) > 0 {
		var err error
		if confirmed, err = stream.ConfirmIdentity(ctx, topo.JS, topo.Prefix, replicas, names...); err != nil {
			return nil, nil, err
		}
	}
	replaced, err := stream.CheckIdentity(ctx, topo.JS, topo.Prefix)
	return confirmed, replaced, err
}

// Write writes the streams, the buckets and the confirmed identities of
// out, one per line, and that the topology is in place.
func Write(w io.Writer, out Output) {
	for _, s := range out.Streams {
		fmt.Fprintf(w, "stream %-16s %-22s replicas %d\n", s.Name, s.Subjects[0], s.Replicas)
	}
	for _, b := range out.Buckets {
		fmt.Fprintf(w, "bucket %s\n", b)
	}
	for _, c := range out.Confirmed {
		fmt.Fprintf(w, "identity of %s confirmed: created %s, first sequence %d\n", c.Stream, c.Created.Format(time.RFC3339Nano), c.FirstSeq)
	}
	fmt.Fprintf(w, "jingwei setup: topology %q in place on %s\n", out.Prefix, out.Server)
}
