package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// isTerminal reports whether f is a character device, as a terminal is.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress draws a one-line bar with \r while work runs. A nil *progress
// draws nothing, so callers need no checks.
type progress struct {
	w     io.Writer
	total int64
	done  atomic.Int64
	label atomic.Pointer[string]

	stop chan struct{}
	wg   sync.WaitGroup
	// stopTick stops the ticker feeding the drawing goroutine, if any.
	stopTick func()
}

const barWidth = 30

// newProgress starts drawing to w every 100 ms; nil w means no bar.
func newProgress(w io.Writer, total int) *progress {
	if w == nil {
		return nil
	}
	t := time.NewTicker(100 * time.Millisecond)
	p := startProgress(w, total, t.C)
	p.stopTick = t.Stop
	return p
}

// startProgress draws the bar to w at every tick.
func startProgress(w io.Writer, total int, tick <-chan time.Time) *progress {
	p := &progress{w: w, total: int64(total), stop: make(chan struct{})}
	p.wg.Go(func() {
		for {
			select {
			case <-p.stop:
				return
			case <-tick:
				p.draw()
			}
		}
	})
	return p
}

func (p *progress) setLabel(s string) {
	if p != nil {
		p.label.Store(&s)
	}
}

func (p *progress) add() {
	if p != nil {
		p.done.Add(1)
	}
}

// reach moves the bar on to n, if it is short of it: a run that ended
// settled every refund it planned, made or given up.
func (p *progress) reach(n int) {
	if p == nil {
		return
	}
	for {
		done := p.done.Load()
		if done >= int64(n) || p.done.CompareAndSwap(done, int64(n)) {
			return
		}
	}
}

func (p *progress) draw() {
	done := min(p.done.Load(), p.total)
	filled := 0
	if p.total > 0 {
		filled = int(done * barWidth / p.total)
	}
	label := ""
	if l := p.label.Load(); l != nil {
		label = *l
	}
	fmt.Fprintf(p.w, "\r%-13s [%s%s] %d/%d refunds", label,
		strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled), done, p.total)
}

// finish stops drawing, draws the bar as it ends (full, after reach),
// and clears the line.
func (p *progress) finish() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	if p.stopTick != nil {
		p.stopTick()
	}
	p.draw()
	fmt.Fprint(p.w, "\r\033[K")
}
