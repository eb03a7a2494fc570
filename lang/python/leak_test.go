package python

import (
	"os"
	"runtime"
	"testing"
)

// TestParseDoesNotLeak parses one file 10,000 times and checks that neither
// the C heap (tree-sitter's trees, parser state, query cursors) nor the Go
// heap grows with the number of parses.
func TestParseDoesNotLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("leak test parses 10,000 files")
	}
	src, err := os.ReadFile("testdata/structure.py")
	if err != nil {
		t.Fatal(err)
	}
	p := newTestParser(t)
	parse := func(n int) {
		for range n {
			if _, err := p.Parse("pkg/sub/structure.py", src); err != nil {
				t.Fatal(err)
			}
		}
	}
	heaps := func() (c, g uint64) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return CHeapInUse(), ms.HeapAlloc
	}
	// Warm up: the first parses grow parser buffers and the cgo runtime
	// allocates per-thread state from the same C heap.
	parse(1000)
	c0, g0 := heaps()
	parse(10_000)
	c1, g1 := heaps()
	t.Logf("C heap %d -> %d bytes, Go heap %d -> %d bytes", c0, c1, g0, g1)
	// One leaked tree of this file is several KiB, so 10,000 parses leaking
	// anything per parse would add tens of MiB; 256 KiB allows for
	// allocator noise only.
	const slack = 256 << 10
	if c1 > c0+slack {
		t.Errorf("C heap grew by %d bytes over 10,000 parses", c1-c0)
	}
	if g1 > g0+slack {
		t.Errorf("Go heap grew by %d bytes over 10,000 parses", g1-g0)
	}
}
