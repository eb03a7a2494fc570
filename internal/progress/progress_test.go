package progress

import (
	"bytes"
	"io"
	"os"
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

type wrapped struct{ io.Writer }

func (w wrapped) Unwrap() io.Writer { return w.Writer }

// TestIsTerminalLooksThroughWrappers: a writer that wraps a character
// device (a serializing wrapper around stderr) still counts as one.
func TestIsTerminalLooksThroughWrappers(t *testing.T) {
	dev, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, tc := range []struct {
		name string
		w    io.Writer
		want bool
	}{
		{"character device", dev, true},
		{"wrapped twice", wrapped{wrapped{dev}}, true},
		{"buffer", &bytes.Buffer{}, false},
		{"wrapped buffer", wrapped{&bytes.Buffer{}}, false},
	} {
		if got := IsTerminal(tc.w); got != tc.want {
			t.Errorf("%s: IsTerminal = %v; want %v", tc.name, got, tc.want)
		}
	}
}
