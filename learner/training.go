package learner

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/a2farm/a2farm/learner/rewards"
	"github.com/a2farm/a2farm/learner/shard"
	"github.com/a2farm/a2farm/schema"
)

// Training is what a labelled trajectory contributes to the shards.
type Training struct {
	// Rows are its conversations: one per stretch of turns whose requests
	// extend each other (a context trim starts a new one).
	Rows []schema.ShardRow
	// Tokens are its token sequences, when the server returned token ids.
	Tokens []schema.TokenRow
	// Stats count what the token sequences hold.
	Stats shard.TokenStats
}

// TrainingData builds the shard rows of a labelled trajectory from its
// request/response record only: ok is false when the trajectory is
// skipped or the trainer filter (no gold file ever surfaced) drops it.
func TrainingData(lt Labeled, keepUnsuccessful bool) (Training, bool, error) {
	tr := lt.Trajectory
	if lt.Skipped != "" || len(tr.Turns) == 0 {
		return Training{}, false, nil
	}
	if !keepUnsuccessful && lt.Labels.Recall[rewards.File] == 0 {
		return Training{}, false, nil
	}
	if len(lt.Weights) != len(tr.Turns) {
		return Training{}, false, fmt.Errorf("trajectory %s: %d weights for %d turns", tr.JobID, len(lt.Weights), len(tr.Turns))
	}
	rows, err := messageRows(lt)
	if err != nil {
		return Training{}, false, err
	}
	toks, stats, err := tokenRows(lt)
	if err != nil {
		return Training{}, false, err
	}
	return Training{Rows: rows, Tokens: toks, Stats: stats}, true, nil
}

// messageRows cuts the trajectory into conversations. Turns a..b form one
// when each request starts with the previous request and its reply; the
// conversation is then request b followed by reply b, and the messages
// before every reply t in it are exactly request t. A request extends the
// previous one exactly when its delta keeps all of that request and its
// reply (the delta keeps the longest common prefix), so the requests are
// rebuilt in place, each from the one before, with one copy per
// conversation.
func messageRows(lt Labeled) ([]schema.ShardRow, error) {
	tr := lt.Trajectory
	tools, err := requestTools(tr)
	if err != nil {
		return nil, err
	}
	var rows []schema.ShardRow
	var base []schema.Message // the previous request and its reply
	reqLen := make([]int, len(tr.Turns))
	first := 0
	// A branch's replayed turns are its parent's: a conversation that
	// ends before the fork turn is not written, and one that spans it
	// starts there (the replayed replies are context, weight 0).
	own := tr.OwnTurns()
	emit := func(first, last int) {
		if last >= own {
			rows = append(rows, lt.conversation(base, reqLen, max(first, own), last, tools))
		}
	}
	for t, turn := range tr.Turns {
		if turn.RequestKeep < 0 || turn.RequestKeep > int64(len(base)) {
			return nil, fmt.Errorf("trajectory %s turn %d keeps %d messages of %d", tr.JobID, turn.Index, turn.RequestKeep, len(base))
		}
		var req []schema.Message
		if t > 0 && turn.RequestKeep == int64(len(base)) {
			req = append(base, turn.RequestAdded...) // extends: same conversation
		} else {
			if t > 0 {
				emit(first, t-1)
				first = t
			}
			req = append(slices.Clone(base[:turn.RequestKeep]), turn.RequestAdded...)
		}
		reqLen[t] = len(req)
		base = append(req, turn.Response())
	}
	if len(tr.Turns) > 0 {
		emit(first, len(tr.Turns)-1)
	}
	return rows, nil
}

// conversation is the row of turns first..last: msgs is request last and
// its reply, reqLen the length of every turn's request.
func (lt Labeled) conversation(msgs []schema.Message, reqLen []int, first, last int, tools []schema.ToolSpec) schema.ShardRow {
	tr := lt.Trajectory
	msgs = slices.Clip(msgs)
	row := schema.ShardRow{
		Span: tr.Span(tr.Turns[first].Index, tr.Turns[last].Index), Messages: msgs, Tools: tools,
		F1: schema.LevelStats{File: lt.Labels.F1[0], Module: lt.Labels.F1[1], Entity: lt.Labels.F1[2]},
		DC: schema.LevelStats{File: lt.Labels.DC[0], Module: lt.Labels.DC[1], Entity: lt.Labels.DC[2]},
	}
	// The replies of turns first..last sit right after their requests;
	// an assistant message before request `first` ends is context kept
	// from an earlier conversation: the most recent earlier turn with the
	// same reply, weight 0 here.
	trainedAt := map[int]int{}
	for t := first; t <= last; t++ {
		trainedAt[reqLen[t]] = t
	}
	for i, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		t, trained := trainedAt[i]
		if !trained {
			t = -1
			for j := first - 1; j >= 0; j-- {
				if schema.MessagesEqual(tr.Turns[j].Response(), m) {
					t = j
					break
				}
			}
		}
		row.Turns = append(row.Turns, int64(t))
		var w, adv, ret, rew float64
		if t >= 0 {
			adv, ret, rew = at(lt.Advantages, t), at(lt.Labels.Returns, t), at(lt.Labels.Rewards, t)
			if trained {
				w = at(lt.Weights, t)
			}
		}
		row.Weights = append(row.Weights, w)
		row.Advantages = append(row.Advantages, adv)
		row.Returns = append(row.Returns, ret)
		row.Rewards = append(row.Rewards, rew)
	}
	return row
}

func at(v []float64, i int) float64 {
	if i < len(v) {
		return v[i]
	}
	return 0
}

// requestTools are the tool specs the requests carried: none in text mode.
func requestTools(tr schema.Trajectory) ([]schema.ToolSpec, error) {
	tools := []schema.ToolSpec{}
	if tr.Policy.TextMode || tr.ToolsJSON == "" {
		return tools, nil
	}
	if err := json.Unmarshal([]byte(tr.ToolsJSON), &tools); err != nil {
		return nil, fmt.Errorf("trajectory %s: tool specs: %w", tr.JobID, err)
	}
	return tools, nil
}

// tokenRows builds the token sequences: a turn's prompt ids and completion
// ids start one; the next turn joins it when its prompt ids start with
// everything the sequence holds (its new prompt ids weigh 0, its
// completion its weight); otherwise — a template that re-renders history,
// a trim — it starts another. Turns without ids are left out.
func tokenRows(lt Labeled) ([]schema.TokenRow, shard.TokenStats, error) {
	tr := lt.Trajectory
	var rows []schema.TokenRow
	var st shard.TokenStats
	// base is the previous turn's prompt and completion ids — its whole
	// sequence — or nil when that turn had none. A prompt extends the
	// sequence exactly when its delta keeps all of base, since the delta
	// keeps the longest common prefix.
	var base []int32
	cur := -1 // the sequence the next turn may join
	withLogprobs := false
	own := tr.OwnTurns()
	for i, turn := range tr.Turns {
		if i < own {
			// A branch's replayed turn is its parent's to train: it only
			// carries the ids forward, for the fork turn's prompt.
			switch {
			case turn.PromptTokenIDs == nil:
				base = nil
			case turn.PromptTokenKeep < 0 || turn.PromptTokenKeep > int64(len(base)):
				return nil, shard.TokenStats{}, fmt.Errorf("trajectory %s turn %d keeps %d prompt ids of %d", tr.JobID, turn.Index, turn.PromptTokenKeep, len(base))
			default:
				// In place: no row exists yet, so base is this loop's own
				// and the prefix costs linear time, not a copy per turn.
				base = append(append(base[:turn.PromptTokenKeep], turn.PromptTokenIDs...), turn.TokenIDs...)
			}
			continue
		}
		if turn.PromptTokenIDs == nil || len(turn.TokenIDs) == 0 {
			st.TurnsWithoutIDs++
			base, cur = nil, -1
			continue
		}
		if turn.PromptTokenKeep < 0 || turn.PromptTokenKeep > int64(len(base)) {
			return nil, shard.TokenStats{}, fmt.Errorf("trajectory %s turn %d keeps %d prompt ids of %d", tr.JobID, turn.Index, turn.PromptTokenKeep, len(base))
		}
		st.TurnsWithIDs++
		st.WeightedTokens += len(turn.TokenIDs)
		w := float32(lt.Weights[i])
		if cur >= 0 {
			st.Mergeable++
		}
		if cur >= 0 && turn.PromptTokenKeep == int64(len(base)) {
			st.Merged++
			seq := &rows[cur]
			seq.InputIDs = append(append(seq.InputIDs, turn.PromptTokenIDs...), turn.TokenIDs...)
			seq.LossWeights = appendRepeat(appendRepeat(seq.LossWeights, 0, len(turn.PromptTokenIDs)), w, len(turn.TokenIDs))
			seq.Logprobs = appendLogprobs(appendRepeat(seq.Logprobs, nan, len(turn.PromptTokenIDs)), turn)
			seq.LastTurn = turn.Index
		} else {
			n := int(turn.PromptTokenKeep) + len(turn.PromptTokenIDs)
			ids := make([]int32, 0, n+len(turn.TokenIDs))
			ids = append(append(append(ids, base[:turn.PromptTokenKeep]...), turn.PromptTokenIDs...), turn.TokenIDs...)
			rows = append(rows, schema.TokenRow{Span: tr.Span(turn.Index, turn.Index), InputIDs: ids,
				LossWeights: appendRepeat(make([]float32, n, len(ids)), w, len(turn.TokenIDs)),
				Logprobs:    appendLogprobs(appendRepeat(make([]float32, 0, len(ids)), nan, n), turn)})
			cur = len(rows) - 1
		}
		if len(turn.Logprobs) > 0 {
			withLogprobs = true
		}
		base = rows[cur].InputIDs // a sequence is always its last turn's prompt and completion
	}
	for i, r := range rows {
		st.Sequences++
		st.Tokens += len(r.InputIDs)
		if !withLogprobs { // the server returned none: the column stays empty
			rows[i].Logprobs = nil
		}
	}
	st.Add(shard.TokenStats{}) // fills the merge rate
	return rows, st, nil
}

var nan = float32(math.NaN())

// appendLogprobs appends the log-probabilities of turn's completion ids:
// the server's, or NaN for each id when it returned none (or a count that
// is not one per id).
func appendLogprobs(s []float32, turn schema.Turn) []float32 {
	if len(turn.Logprobs) == len(turn.TokenIDs) {
		return append(s, turn.Logprobs...)
	}
	return appendRepeat(s, nan, len(turn.TokenIDs))
}

func appendRepeat(s []float32, v float32, n int) []float32 {
	for range n {
		s = append(s, v)
	}
	return s
}

// Write adds the training data of labelled trajectories to w and returns
// how many trajectories were kept and how many rows they gave.
func Write(w *shard.Writer, lts []Labeled, keepUnsuccessful bool) (kept, rows int, err error) {
	for _, lt := range lts {
		td, ok, err := TrainingData(lt, keepUnsuccessful)
		if err != nil {
			return kept, rows, err
		}
		if !ok {
			continue
		}
		kept++
		rows += len(td.Rows)
		for _, r := range td.Rows {
			if err := w.Add(r); err != nil {
				return kept, rows, err
			}
		}
		if err := w.AddTokens(td.Tokens, td.Stats); err != nil {
			return kept, rows, err
		}
	}
	return kept, rows, nil
}

// ShardConfig says where and how a result's shards are written.
type ShardConfig struct {
	Dir string
	// MaxRows bounds rows per file; 0 keeps the writer's default.
	MaxRows int
	// SFT writes supervised rows instead (SFTRows: the turns of
	// successful trajectories, weight 1).
	SFT bool
	// Source says where the trajectories came from — a run, iteration
	// and instance, or an archive and a gold file — for the manifest.
	Source map[string]any
}

// WriteShards writes res as training shards. The learner service and
// replay both write through here, so their manifests hold the same
// record: the hyperparameters, the diagnostics, the source and whether
// the rows are supervised.
func WriteShards(res *Result, cfg Config, sc ShardConfig) (m *shard.Manifest, kept int, err error) {
	params := map[string]any{
		"rewards": cfg.Rewards, "advantage": cfg.Advantage, "keep_unsuccessful": cfg.KeepUnsuccessful,
		"diagnostics": res.Diagnostics, "sft": sc.SFT, "source": sc.Source,
	}
	w, err := shard.NewWriter(shard.Config{Dir: sc.Dir, MaxRows: sc.MaxRows, Params: params})
	if err != nil {
		return nil, 0, err
	}
	lts, keep := res.Trajectories, cfg.KeepUnsuccessful
	if sc.SFT {
		lts, keep = SFTRows(res), true
	}
	if kept, _, err = Write(w, lts, keep); err != nil {
		w.Close()
		return nil, 0, err
	}
	m, err = w.Close()
	return m, kept, err
}

// ShardRecord is a shard folder's manifest as WriteShards wrote it, its
// params typed: the one reader of what the learner and replay record, for
// iterate's figures and the report.
type ShardRecord struct {
	shard.Manifest
	Diagnostics Diagnostics
	SFT         bool
	Source      ShardSource
}

// ShardSource is where a folder's trajectories came from: a run's group
// (Run, Iteration, Instance, Gold) as the learner writes it, or an archive
// as replay does (Run and Instance empty).
type ShardSource struct {
	Run       string            `json:"run"`
	Iteration int64             `json:"iteration"`
	Instance  string            `json:"instance"`
	Gold      *schema.Locations `json:"gold"`
}

// ReadShardManifest reads dir/manifest.json.
func ReadShardManifest(dir string) (*ShardRecord, error) {
	path := filepath.Join(dir, shard.ManifestName)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec ShardRecord
	var typed struct {
		Params struct {
			Diagnostics Diagnostics `json:"diagnostics"`
			SFT         bool        `json:"sft"`
			Source      ShardSource `json:"source"`
		} `json:"params"`
	}
	if err := json.Unmarshal(data, &rec.Manifest); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := json.Unmarshal(data, &typed); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rec.Diagnostics, rec.SFT, rec.Source = typed.Params.Diagnostics, typed.Params.SFT, typed.Params.Source
	return &rec, nil
}
