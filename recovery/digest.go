package recovery

import (
	"encoding/json"
	"sync"
)

// digester computes argument digests (schema.ArgsDigest, the expensive part
// of a scan) on a second goroutine while the scanning goroutine keeps
// decoding, so that a machine with two cores pays for them in CPU time but
// hardly in wall time.
//
// Jobs travel in batches that own a copy of their arguments (a history
// source may reuse its buffers). A full batch is held back until the next
// one fills, so that by the time it is sent most of its calls have their
// result, and calls that need no digest (needless: completed, see
// scan.needless) are dropped from it. At most digestQueue batches are in
// flight, so memory stays bounded whatever the history's size. Results are
// read only after wait, in job order.
type digester struct {
	needless func(idx int32) bool // called on the scanning goroutine only
	batch    *digestBatch         // filling
	held     *digestBatch         // full, sent when batch fills
	ch       chan *digestBatch
	wg       sync.WaitGroup
	results  []digestResult // owned by the worker until wait returns
}

type digestBatch struct {
	jobs []digestJob
	buf  []byte // the arguments of every job, back to back
}

type digestJob struct {
	idx        int32 // -1: dropped
	start, end int   // the job's arguments in buf
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
	if len(b.jobs) < digestBatchLen {
		return
	}
	if h := d.held; h != nil {
		d.drop(h)
		if d.ch == nil {
			d.ch = make(chan *digestBatch, digestQueue)
			d.wg.Add(1)
			go d.work()
		}
		d.ch <- h
	}
	d.held, d.batch = b, nil
}

// drop marks the jobs whose digest is not needed.
func (d *digester) drop(b *digestBatch) {
	if d.needless == nil {
		return
	}
	for i := range b.jobs {
		if d.needless(b.jobs[i].idx) {
			b.jobs[i].idx = -1
		}
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
		if j.idx < 0 {
			continue
		}
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
	for _, b := range []*digestBatch{d.held, d.batch} {
		if b != nil {
			d.drop(b)
			d.results = b.run(d.results)
		}
	}
	d.held, d.batch = nil, nil
	return d.results
}
