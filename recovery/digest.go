package recovery

import (
	"encoding/json"
	"sync"
)

// digester computes argument digests (schema.ArgsDigest, the expensive part
// of a scan) on a second goroutine while the scanning goroutine keeps
// decoding, so that a machine with two cores pays for them in CPU time but
// hardly in wall time. Jobs travel in batches; at most digestQueue batches
// are in flight, so memory stays bounded whatever the history's size.
// Results are read only after wait, in job order.
type digester struct {
	batch   []digestJob
	ch      chan []digestJob
	wg      sync.WaitGroup
	results []digestResult // owned by the worker until wait returns
}

type digestJob struct {
	idx  int32
	args json.RawMessage
}

type digestResult struct {
	idx    int32
	digest string
	err    error
}

const (
	digestBatch = 128
	digestQueue = 8
)

// add queues the digest of args for call idx.
func (d *digester) add(idx int32, args json.RawMessage) {
	d.batch = append(d.batch, digestJob{idx, args})
	if len(d.batch) == digestBatch {
		if d.ch == nil {
			d.ch = make(chan []digestJob, digestQueue)
			d.wg.Add(1)
			go d.work()
		}
		d.ch <- d.batch
		d.batch = make([]digestJob, 0, digestBatch)
	}
}

func (d *digester) work() {
	defer d.wg.Done()
	for b := range d.ch {
		d.results = d.run(d.results, b)
	}
}

func (d *digester) run(out []digestResult, b []digestJob) []digestResult {
	for _, j := range b {
		s, err := argsDigest(j.args)
		out = append(out, digestResult{j.idx, s, err})
	}
	return out
}

// wait finishes every queued job and returns the results in job order. It
// must be called exactly once, also on an early return (it then stops the
// worker after the queued batches).
func (d *digester) wait() []digestResult {
	if d.ch != nil {
		close(d.ch)
		d.wg.Wait()
	}
	d.results = d.run(d.results, d.batch)
	d.batch = nil
	return d.results
}
