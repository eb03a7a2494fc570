package python

/*
#include <stdlib.h>
#include <malloc.h>

// Declared here rather than included: the definition lives in the C objects
// of github.com/tree-sitter/go-tree-sitter, linked into the same binary.
extern void ts_set_allocator(
	void *(*new_malloc)(size_t),
	void *(*new_calloc)(size_t, size_t),
	void *(*new_realloc)(void *, size_t),
	void (*new_free)(void *));

static void a2farm_use_libc_allocator(void) {
	ts_set_allocator(malloc, calloc, realloc, free);
}

static size_t a2farm_c_heap_in_use(void) {
	struct mallinfo2 mi = mallinfo2();
	return mi.uordblks + mi.hblkhd;
}
*/
import "C"

import (
	"sync"

	ts "github.com/tree-sitter/go-tree-sitter"
)

// useLibcAllocator switches tree-sitter to libc malloc once per process.
// Both the binding's default allocator and libc share the same heap, so
// objects allocated before the switch are still freed correctly.
var useLibcAllocator = sync.OnceFunc(func() {
	_ = ts.NewLanguage // ensure the binding (and its init) is linked first
	C.a2farm_use_libc_allocator()
})

// CHeapInUse reports the bytes currently allocated from the C heap. Tests
// and benchmarks use it to prove that parsing does not leak tree-sitter
// memory, which the Go runtime's statistics cannot see.
func CHeapInUse() uint64 {
	return uint64(C.a2farm_c_heap_in_use())
}
