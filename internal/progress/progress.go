// Package progress shows progress of long work on a terminal: a redrawn
// line with count, rate and ETA when the output is a terminal, and a line
// every few seconds (for logs and CI) when it is not.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Bar reports progress of a known number of steps. It is safe for
// concurrent use.
type Bar struct {
	mu       sync.Mutex
	w        io.Writer
	label    string
	total    int
	done     int
	start    time.Time
	last     time.Time
	terminal bool
	now      func() time.Time
}

// New returns a bar that writes to w.
func New(w io.Writer, label string, total int) *Bar {
	b := &Bar{w: w, label: label, total: total, now: time.Now, terminal: IsTerminal(w)}
	b.start = b.now()
	// Off a terminal the first line waits for the interval, so short runs
	// print only their final line.
	b.last = b.start
	return b
}

// SetTotal changes the number of steps, for work that grows as it goes
// (branches planned once their parents are in).
func (b *Bar) SetTotal(total int) {
	b.mu.Lock()
	b.total = total
	b.mu.Unlock()
}

// Set records that n steps are done.
func (b *Bar) Set(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = n
	now := b.now()
	interval := 5 * time.Second
	if b.terminal {
		interval = 100 * time.Millisecond
	}
	if n < b.total && now.Sub(b.last) < interval {
		return
	}
	b.last = now
	b.draw(now)
}

// Finish draws the final state and ends the line.
func (b *Bar) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.terminal {
		fmt.Fprintln(b.w)
	}
}

func (b *Bar) draw(now time.Time) {
	elapsed := now.Sub(b.start)
	line := fmt.Sprintf("%s %d/%d", b.label, b.done, b.total)
	if b.total > 0 {
		line += fmt.Sprintf(" (%d%%)", 100*b.done/b.total)
	}
	if b.done > 0 && b.done < b.total {
		eta := time.Duration(float64(elapsed) / float64(b.done) * float64(b.total-b.done))
		line += fmt.Sprintf(" eta %s", eta.Round(time.Second))
	} else {
		line += fmt.Sprintf(" in %s", elapsed.Round(time.Millisecond))
	}
	if b.terminal {
		fmt.Fprintf(b.w, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(b.w, line)
	}
}

// IsTerminal reports whether w is a character device (a terminal).
// Writers that wrap another (with an Unwrap method) are looked through.
func IsTerminal(w io.Writer) bool {
	for {
		u, ok := w.(interface{ Unwrap() io.Writer })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
