package main

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/schema"
)

// TestBranchesResendTheParentsRequests forks every sample of the
// on-policy script at each of its turns 1..4 — after a multi-call turn,
// after a plain-text turn, at a trimmed request, after it — and checks
// against what the recording server received: a branch sends nothing for
// the turns it replays, its first request (the fork turn's) carries
// exactly the parent's messages and tools, byte for byte, with its own
// seed; and the shards train every turn the server answered exactly once
// (so no replayed turn twice), before it exactly its request.
func TestBranchesResendTheParentsRequests(t *testing.T) {
	const samples, turns = 3, 5 // the script plays 5 turns
	for _, textMode := range []bool{false, true} {
		t.Run(fmt.Sprintf("text mode %v", textMode), func(t *testing.T) {
			s := rollOutOnPolicy(t, textMode, []string{"--branches", "1", "--fork-at", "1,2,3,4"})
			for parent := range int64(samples) {
				for fork := int64(1); fork < turns; fork++ {
					// Points go by parent, then turn: one branch each.
					b := samples + parent*(turns-1) + fork - 1
					for turn := range fork {
						if _, sent := s.requests[turnSeed(b, turn)]; sent {
							t.Errorf("branch %d (parent %d, fork turn %d) sent a request for replayed turn %d", b, parent, fork, turn)
						}
					}
					got, ok := s.requests[turnSeed(b, fork)]
					want := s.requests[turnSeed(parent, fork)]
					switch {
					case !ok:
						t.Errorf("branch %d (parent %d) sent no request for its fork turn %d", b, parent, fork)
					case !bytes.Equal(got, want):
						t.Errorf("branch %d fork turn %d: messages differ from the parent's\n branch %s\n parent %s", b, fork, got, want)
					case !bytes.Equal(s.tools[turnSeed(b, fork)], s.tools[turnSeed(parent, fork)]):
						t.Errorf("branch %d fork turn %d: tools differ from the parent's", b, fork)
					}
				}
			}
			if len(s.requests) != samples*turns+samples*(turns-1)*turns/2 {
				t.Errorf("the server answered %d requests; want %d of the samples and %d of the branches",
					len(s.requests), samples*turns, samples*(turns-1)*turns/2)
			}
			checkMessageRows(t, s.rows, s.requests)
			checkTokenRows(t, s.tokens, s.rows, s.script.replies, len(s.requests))
			checkManifest(t, s)
			// replay --sweep-H reports base only beside base + branches.
			code, out, errOut := run(t, "replay", "--archive", s.archive, "--gold", s.gold, "--keep-unsuccessful",
				"--sweep-H", "0,2", "--out", t.TempDir())
			branches := samples * (turns - 1)
			for _, want := range []string{"0  base only ", "0  base+branches ", "2  base only ", "2  base+branches ",
				fmt.Sprintf("branches: %d played %d turns of their own", branches, samples*(turns-1)*turns/2), "base samples alone: group coverage"} {
				if code != 0 || !strings.Contains(out, want) {
					t.Errorf("replay --sweep-H (exit %d) does not say %q:\n%s%s", code, want, out, errOut)
				}
			}
			trs, err := schema.ReadTrajectoryDir(s.archive)
			if err != nil {
				t.Fatal(err)
			}
			byJob := map[string]schema.Trajectory{}
			for _, tr := range trs {
				byJob[tr.JobID] = tr
			}
			for _, tr := range trs {
				if !tr.Fork.IsBranch() {
					continue
				}
				parent := byJob[tr.Fork.ParentJobID]
				for i := range tr.Fork.Turn {
					if !turnsEqual(tr.Turns[i], parent.Turns[i]) {
						t.Errorf("%s: replayed turn %d is not its parent's", tr.JobID, i)
					}
				}
			}
		})
	}
}

// turnsEqual compares two turns as read back from Arrow files.
func turnsEqual(a, b schema.Turn) bool { return reflect.DeepEqual(a, b) }
