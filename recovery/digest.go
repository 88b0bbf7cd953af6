package recovery

import (
	"encoding/json"
	"sync"
)

// digester computes argument digests (schema.ArgsDigest, the expensive part
// of a scan) on a second goroutine while the scanning goroutine keeps
// decoding, so that a machine with two cores pays for them in CPU time but
// hardly in wall time. Jobs travel in batches that own a copy of their
// arguments (a history source may reuse its buffers); at most digestQueue
// batches are in flight, so memory stays bounded whatever the history's
// size. Results are read only after wait, in job order.
type digester struct {
	batch   *digestBatch
	ch      chan *digestBatch
	wg      sync.WaitGroup
	results []digestResult // owned by the worker until wait returns
}

type digestBatch struct {
	jobs []digestJob
	buf  []byte // the arguments of every job, back to back
}

type digestJob struct {
	idx        int32
	start, end int // the job's arguments in buf
}

type digestResult struct {
	idx    int32
	digest string
	err    error
}

const (
	digestBatchLen = 128
	digestQueue    = 8
)

// add queues the digest of args for call idx.
func (d *digester) add(idx int32, args json.RawMessage) {
	if d.batch == nil {
		d.batch = &digestBatch{jobs: make([]digestJob, 0, digestBatchLen)}
	}
	b := d.batch
	start := len(b.buf)
	b.buf = append(b.buf, args...)
	b.jobs = append(b.jobs, digestJob{idx, start, len(b.buf)})
	if len(b.jobs) == digestBatchLen {
		if d.ch == nil {
			d.ch = make(chan *digestBatch, digestQueue)
			d.wg.Add(1)
			go d.work()
		}
		d.ch <- b
		d.batch = nil
	}
}

func (d *digester) work() {
	defer d.wg.Done()
	for b := range d.ch {
		d.results = b.run(d.results)
	}
}

func (b *digestBatch) run(out []digestResult) []digestResult {
	for _, j := range b.jobs {
		args := b.buf[j.start:j.end:j.end]
		if j.start == j.end {
			args = nil // absent arguments stay absent
		}
		s, err := argsDigest(args)
		out = append(out, digestResult{j.idx, s, err})
	}
	return out
}

// wait finishes every queued job and returns the results in job order. It
// must be called exactly once, also on an early return or a panic (it then
// stops the worker after the queued batches).
func (d *digester) wait() []digestResult {
	if d.ch != nil {
		close(d.ch)
		d.wg.Wait()
	}
	if d.batch != nil {
		d.results = d.batch.run(d.results)
		d.batch = nil
	}
	return d.results
}
