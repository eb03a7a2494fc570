package worker

import (
	"errors"
	"fmt"
	"time"
)

// A job's error decides its message's fate: nil acks; Permanent
// terminates (bad input: never retry); RetryAfter naks with a delay
// (transient trouble: retry later, elsewhere); anything else naks at once.
type (
	// PermanentError marks a job that can never succeed (bad input).
	PermanentError struct{ Err error }
	// RetryError marks a transient failure worth retrying after Delay.
	RetryError struct {
		Err   error
		Delay time.Duration
	}
)

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }
func (e *RetryError) Error() string     { return fmt.Sprintf("retry in %s: %v", e.Delay, e.Err) }
func (e *RetryError) Unwrap() error     { return e.Err }

// Permanent wraps err so that the job is terminated.
func Permanent(err error) error { return &PermanentError{err} }

// RetryAfter wraps err so that the job is redelivered after delay.
func RetryAfter(err error, delay time.Duration) error { return &RetryError{err, delay} }

// fate says what to do with a message given the job's error.
type fate int

const (
	fateAck fate = iota
	fateTerm
	fateNakDelay
	fateNak
)

func decide(err error) (fate, time.Duration) {
	var perm *PermanentError
	var retry *RetryError
	switch {
	case err == nil:
		return fateAck, 0
	case errors.As(err, &perm):
		return fateTerm, 0
	case errors.As(err, &retry):
		return fateNakDelay, retry.Delay
	}
	return fateNak, 0
}
