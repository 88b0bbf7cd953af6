package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress is told how far Run is. Implementations must be safe for use
// from one goroutine at a time (Run calls them in order).
type Progress interface {
	// Start is called once with the number of steps.
	Start(steps int)
	// Step is called when step i (0-based) named name starts; i == steps
	// when everything is done.
	Step(i int, name string)
	// Done is called once at the end, also after an error.
	Done()
}

type nopProgress struct{}

func (nopProgress) Start(int)        {}
func (nopProgress) Step(int, string) {}
func (nopProgress) Done()            {}

// Bar is a Progress that draws a one-line progress bar on a terminal,
// redrawn in place with a carriage return, with the elapsed time (updated
// every second while a step runs). Use it only when W is a terminal; the
// zero value (W nil) draws nothing. Safe for concurrent use.
type Bar struct {
	// W is the terminal, normally os.Stderr.
	W io.Writer
	// Width is the bar's width in cells. Defaults to 30.
	Width int

	mu    sync.Mutex
	steps int
	i     int
	name  string
	start time.Time
	last  int
	stop  chan struct{}
}

// Start implements Progress.
func (b *Bar) Start(steps int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.steps, b.start = steps, time.Now()
	if b.W == nil || b.stop != nil {
		return
	}
	b.stop = make(chan struct{})
	go func(stop chan struct{}) {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				b.mu.Lock()
				if b.stop == stop { // not Done yet
					b.draw()
				}
				b.mu.Unlock()
			}
		}
	}(b.stop)
}

// Step implements Progress.
func (b *Bar) Step(i int, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.i, b.name = i, name
	b.draw()
}

// draw redraws the bar; b.mu is held.
func (b *Bar) draw() {
	if b.W == nil || b.steps == 0 {
		return
	}
	i, name := b.i, b.name
	w := b.Width
	if w <= 0 {
		w = 30
	}
	filled := min(w*i/b.steps, w)
	line := fmt.Sprintf("[%s%s] %d/%d %5.0fs %s", strings.Repeat("#", filled), strings.Repeat(".", w-filled), i, b.steps, time.Since(b.start).Seconds(), name)
	pad := max(b.last-len(line), 0)
	b.last = len(line)
	fmt.Fprintf(b.W, "\r%s%s", line, strings.Repeat(" ", pad))
}

// Done implements Progress: it stops the redraws and clears the bar's
// line.
func (b *Bar) Done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stop != nil {
		close(b.stop)
		b.stop = nil
	}
	if b.W == nil || b.last == 0 {
		return
	}
	fmt.Fprintf(b.W, "\r%s\r", strings.Repeat(" ", b.last))
	b.last = 0
}
