package learner

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/a2farm/a2farm/learner/shard"
	"github.com/a2farm/a2farm/schema"
)

// synthetic makes instances × samples trajectories of turns steps each,
// with actions from a small vocabulary (so history groups form) and
// surfaced ids that sometimes hit the gold.
func synthetic(instances, samples, turns int) ([]schema.Trajectory, map[string]schema.Locations) {
	rng := rand.New(rand.NewPCG(7, 7))
	gold := map[string]schema.Locations{}
	var trs []schema.Trajectory
	actions := []string{"search_a", "search_b", "read_x", "read_y", "tree_up", "tree_down"}
	for i := range instances {
		id := fmt.Sprintf("o__r-%d", i)
		file := fmt.Sprintf("pkg/m%d.py", i%50)
		gold[id] = schema.Locations{Files: []string{file}, Modules: []string{file + ":C"}, Entities: []string{file + ":C.f"}}
		for s := range samples {
			tr := schema.Trajectory{JobID: schema.JobID("r", 0, id, int64(s)), InstanceID: id, Sample: int64(s), Status: schema.StatusOK,
				ToolsJSON:   "[]",
				Predictions: schema.Locations{Files: []string{file}, Entities: []string{file + ":C.f"}}}
			for t := range turns {
				turn := schema.Turn{Index: int64(t), ToolName: "tool", ToolArgs: "{}", ActionKey: actions[rng.IntN(len(actions))],
					AssistantContent: "thinking", Observation: "OBSERVATION:\nsome text " + id}
				if rng.IntN(4) == 0 {
					turn.Surfaced = schema.Locations{Files: []string{file}, Modules: []string{file + ":C"}, Entities: []string{file + ":C.f"}}
				}
				tr.Turns = append(tr.Turns, turn)
			}
			trs = append(trs, withTokenIDs(recorded(tr), rng, 1))
		}
	}
	return trs, gold
}

// withTokenIDs gives every turn prompt and completion ids as a server
// would: each prompt extends the previous prompt and completion by the
// tool result's tokens — 30·scale completion ids, 40·scale new prompt ids
// (300·scale for the first prompt), about 100·scale per turn.
func withTokenIDs(tr schema.Trajectory, rng *rand.Rand, scale int) schema.Trajectory {
	ids := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = rng.Int32N(150_000)
		}
		return out
	}
	kept := 0
	for i := range tr.Turns {
		t := &tr.Turns[i]
		fresh := 40 * scale
		if i == 0 {
			fresh = 300 * scale
		}
		t.PromptTokenKeep, t.PromptTokenIDs = int64(kept), ids(fresh)
		t.TokenIDs = ids(30 * scale)
		kept += fresh + len(t.TokenIDs)
	}
	return tr
}

// BenchmarkReplay runs the learner (rewards, advantages, message and
// token shards written as Parquet) over 100,000 synthetic turns per
// iteration and reports turns per minute, with about 100 token ids per
// turn and with about 1,000 (what real agent turns carry: see
// BenchmarkTrainingBytes).
func BenchmarkReplay(b *testing.B) {
	trs, gold := synthetic(1250, 8, 10) // 100,000 turns
	turns := 0
	for _, tr := range trs {
		turns += len(tr.Turns)
	}
	dense := make([]schema.Trajectory, len(trs))
	rng := rand.New(rand.NewPCG(9, 9))
	for i, tr := range trs {
		tr.Turns = slices.Clone(tr.Turns)
		dense[i] = withTokenIDs(tr, rng, 10)
	}
	for _, set := range []struct {
		name string
		trs  []schema.Trajectory
	}{{"ids=100/turn", trs}, {"ids=1000/turn", dense}} {
		b.Run(set.name, func(b *testing.B) {
			ids := 0
			for b.Loop() {
				res, err := Process(set.trs, gold, DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				w, err := shard.NewWriter(shard.Config{Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := Write(w, res.Trajectories, false); err != nil {
					b.Fatal(err)
				}
				m, err := w.Close()
				if err != nil {
					b.Fatal(err)
				}
				ids = m.Tokens.Tokens
			}
			perOp := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(turns)/perOp*60, "turns/min")
			b.ReportMetric(float64(ids)/perOp/1e6, "M-ids/s")
			b.ReportMetric(float64(turns), "turns/op")
		})
	}
}
