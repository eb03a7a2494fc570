package main

// Range checks of the flags several commands share: one check per flag,
// one message naming the flag, its value and the range, whichever command
// it is given to.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker"
)

// maxConcurrency bounds the episodes one process keeps in flight.
const maxConcurrency = 4096

func checkRange(flag string, value, lo, hi int) error {
	if value < lo || value > hi {
		return usagef("--%s %d: want %d to %d", flag, value, lo, hi)
	}
	return nil
}

// checkSamples is --samples of localize, up and coordinator.
func checkSamples(n int) error { return checkRange("samples", n, 1, worker.MaxSamples) }

// checkConcurrency is --concurrency of localize, up and worker.
func checkConcurrency(n int) error { return checkRange("concurrency", n, 1, maxConcurrency) }

// outcomes says how rollouts ended, in words: "42 ok, 6 policy_error".
func outcomes(trs []schema.Trajectory) string {
	counts := map[schema.Status]int{}
	for _, tr := range trs {
		counts[tr.Status]++
	}
	var parts []string
	for _, s := range []schema.Status{schema.StatusOK, schema.StatusTruncated, schema.StatusPolicyError,
		schema.StatusToolError, schema.StatusTimeout, schema.StatusInfraError} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
			delete(counts, s)
		}
	}
	for s, n := range counts { // a status this build does not know
		parts = append(parts, fmt.Sprintf("%d %s", n, s))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// nonePlayedOut is the error of a command none of whose rollouts played
// to its end, naming the first failure; nil when one did (or none ran).
func nonePlayedOut(trs []schema.Trajectory) error {
	for _, tr := range trs {
		if tr.Status.PlayedOut() {
			return nil
		}
	}
	if len(trs) == 0 {
		return nil
	}
	return fmt.Errorf("no rollout played to its end (%s); the first: %s: %s", outcomes(trs), trs[0].Status, trs[0].Error)
}

// required returns a usage error naming the first of the flags, given as
// name/value pairs, whose value is empty.
func required(nameValues ...string) error {
	for i := 0; i+1 < len(nameValues); i += 2 {
		if nameValues[i+1] == "" {
			return usagef("--%s is required", nameValues[i])
		}
	}
	return nil
}

// inputs returns a usage error naming the first input, given as flag
// name/path pairs, that does not exist (an empty path is not checked):
// a missing file or folder is found before any work starts.
func inputs(namePaths ...string) error {
	for i := 0; i+1 < len(namePaths); i += 2 {
		path := namePaths[i+1]
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return usagef("--%s %s: no such file or folder", namePaths[i], path)
			}
			return usagef("--%s %s: %v", namePaths[i], path, errors.Unwrap(err))
		}
	}
	return nil
}
