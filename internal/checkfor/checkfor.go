// Package checkfor waits in tests for a condition to hold, the way
// nats-server's tests do: poll a check that says what is still wrong, and
// fail with its last answer when time runs out. Tests only.
package checkfor

import (
	"testing"
	"time"
)

// Within polls check every interval until it returns nil, and fails the
// test with check's last error after total.
func Within(tb testing.TB, total, interval time.Duration, check func() error) {
	tb.Helper()
	deadline := time.Now().Add(total)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("still not so after %s: %v", total, err)
		}
		time.Sleep(interval)
	}
}
