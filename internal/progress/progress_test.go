package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestBarOffTerminalPrintsSparseLines(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := New(&buf, "gold", 4)
	b.now = func() time.Time { return now }
	b.start, b.last = now, now

	now = now.Add(time.Second)
	b.Set(1) // within the 5 s interval: silent
	now = now.Add(6 * time.Second)
	b.Set(2) // interval passed: one line with an ETA
	now = now.Add(time.Second)
	b.Set(4) // done: always printed
	b.Finish()

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines = %q, want 2", lines)
	}
	if lines[0] != "gold 2/4 (50%) eta 7s" {
		t.Errorf("first line = %q", lines[0])
	}
	if lines[1] != "gold 4/4 (100%) in 8s" {
		t.Errorf("last line = %q", lines[1])
	}
}
