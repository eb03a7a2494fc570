package schema

import (
	"encoding/json"
	"fmt"
	"time"
)

// Instance is one dataset row (SWE-bench style).
type Instance struct {
	InstanceID       string `json:"instance_id" arrow:"instance_id"`
	Repo             string `json:"repo" arrow:"repo"`
	BaseCommit       string `json:"base_commit" arrow:"base_commit"`
	ProblemStatement string `json:"problem_statement" arrow:"problem_statement"`
	Patch            string `json:"patch" arrow:"patch"`
	// Extra holds the row's other fields (hints, tests, version...) as a
	// JSON object, kept so that nothing a user supplied is lost.
	Extra json.RawMessage `json:"-" arrow:"extra_json"`
}

// PackageName is the prefix of the instance id before its first "_", which
// the agent prompt uses as the package name.
func (in Instance) PackageName() string {
	for i := 0; i < len(in.InstanceID); i++ {
		if in.InstanceID[i] == '_' {
			return in.InstanceID[:i]
		}
	}
	return in.InstanceID
}

// Gold is one row of a gt_location.jsonl file: the locations the gold
// patch edits. FileChanges is nil (JSON null) when the instance has no
// usable gold (no Python file edited, too many files, patch did not apply).
type Gold struct {
	InstanceID       string       `json:"instance_id" arrow:"instance_id"`
	Repo             string       `json:"repo" arrow:"repo"`
	BaseCommit       string       `json:"base_commit" arrow:"base_commit"`
	ProblemStatement string       `json:"problem_statement" arrow:"problem_statement"`
	Patch            string       `json:"patch" arrow:"patch"`
	FileChanges      []FileChange `json:"file_changes" arrow:"file_changes"`
}

// FileChange lists the edited locations of one file.
type FileChange struct {
	File    string  `json:"file" arrow:"file"`
	Changes Changes `json:"changes" arrow:"changes"`
}

// Changes holds entity and module ids; as in the reference format, empty
// lists are left out of the JSON. Added* are never used for scoring.
type Changes struct {
	EditedEntities []string `json:"edited_entities,omitempty" arrow:"edited_entities"`
	EditedModules  []string `json:"edited_modules,omitempty" arrow:"edited_modules"`
	AddedEntities  []string `json:"added_entities,omitempty" arrow:"added_entities"`
	AddedModules   []string `json:"added_modules,omitempty" arrow:"added_modules"`
}

// Locations are gold or predicted ids at the three levels.
type Locations struct {
	Files    []string `json:"files" arrow:"files"`
	Modules  []string `json:"modules" arrow:"modules"`
	Entities []string `json:"entities" arrow:"entities"`
}

// Locations returns the gold sets of a row: every file, the union of edited
// modules and the union of edited entities, each de-duplicated in
// first-seen order.
func (g Gold) Locations() Locations {
	var loc Locations
	seen := map[string]bool{}
	add := func(list *[]string, level string, ids []string) {
		for _, id := range ids {
			if key := level + id; !seen[key] {
				seen[key] = true
				*list = append(*list, id)
			}
		}
	}
	for _, fc := range g.FileChanges {
		add(&loc.Files, "f", []string{fc.File})
		add(&loc.Modules, "m", fc.Changes.EditedModules)
		add(&loc.Entities, "e", fc.Changes.EditedEntities)
	}
	return loc
}

// Job statuses of a finished rollout.
const (
	StatusOK          = "ok"
	StatusTruncated   = "truncated"
	StatusPolicyError = "policy_error"
	StatusToolError   = "tool_error"
	StatusInfraError  = "infra_error"
	StatusTimeout     = "timeout"
)

// Policy names the model that acts in an episode.
type Policy struct {
	Kind     string `json:"kind" arrow:"kind"` // openai | heuristic | replay
	Model    string `json:"model,omitempty" arrow:"model"`
	Endpoint string `json:"endpoint,omitempty" arrow:"endpoint"` // a name, never a secret
	Version  string `json:"version,omitempty" arrow:"version"`
}

// Sampling holds the decoding parameters sent to the policy server.
type Sampling struct {
	Temperature       float64 `json:"temperature" arrow:"temperature"`
	TopP              float64 `json:"top_p" arrow:"top_p"`
	RepetitionPenalty float64 `json:"repetition_penalty" arrow:"repetition_penalty"`
	MaxTokens         int64   `json:"max_tokens" arrow:"max_tokens"`
}

// Limits bound one episode.
type Limits struct {
	MaxToolCalls     int64 `json:"max_tool_calls" arrow:"max_tool_calls"`
	MaxContextTokens int64 `json:"max_context_tokens" arrow:"max_context_tokens"`
	WallTimeSeconds  int64 `json:"wall_time_seconds" arrow:"wall_time_seconds"`
}

// Job is one rollout to run: an instance, a sample index and everything
// needed to reproduce the episode.
type Job struct {
	JobID            string   `json:"job_id" arrow:"job_id"`
	RunID            string   `json:"run_id" arrow:"run_id"`
	Iteration        int64    `json:"iteration" arrow:"iteration"`
	InstanceID       string   `json:"instance_id" arrow:"instance_id"`
	Repo             string   `json:"repo" arrow:"repo"`
	BaseCommit       string   `json:"base_commit" arrow:"base_commit"`
	ProblemStatement string   `json:"problem_statement" arrow:"problem_statement"`
	Sample           int64    `json:"sample" arrow:"sample"`
	Seed             int64    `json:"seed" arrow:"seed"`
	Policy           Policy   `json:"policy" arrow:"policy"`
	Sampling         Sampling `json:"sampling" arrow:"sampling"`
	Limits           Limits   `json:"limits" arrow:"limits"`
	Tools            []string `json:"tools" arrow:"tools"`
	PromptVariant    string   `json:"prompt_variant" arrow:"prompt_variant"`
	Attempt          int64    `json:"attempt" arrow:"attempt"`
}

// JobID is the dedup key of a rollout everywhere: run/iteration/instance/sample.
func JobID(run string, iteration int64, instanceID string, sample int64) string {
	return fmt.Sprintf("%s/%d/%s/%d", run, iteration, instanceID, sample)
}

// Trajectory is the record of one rollout.
type Trajectory struct {
	JobID      string `json:"job_id" arrow:"job_id"`
	RunID      string `json:"run_id" arrow:"run_id"`
	Iteration  int64  `json:"iteration" arrow:"iteration"`
	InstanceID string `json:"instance_id" arrow:"instance_id"`
	Repo       string `json:"repo" arrow:"repo"`
	Sample     int64  `json:"sample" arrow:"sample"`
	Status     string `json:"status" arrow:"status"`
	Error      string `json:"error,omitempty" arrow:"error"`
	// FinalAnswer is the raw text of the agent's answer; Predictions is
	// what it parsed to.
	FinalAnswer      string    `json:"final_answer" arrow:"final_answer"`
	Predictions      Locations `json:"predictions" arrow:"predictions"`
	StartedAt        time.Time `json:"started_at" arrow:"started_at"`
	FinishedAt       time.Time `json:"finished_at" arrow:"finished_at"`
	PromptTokens     int64     `json:"prompt_tokens" arrow:"prompt_tokens"`
	CompletionTokens int64     `json:"completion_tokens" arrow:"completion_tokens"`
	PolicyVersion    string    `json:"policy_version" arrow:"policy_version"`
	WorkerID         string    `json:"worker_id" arrow:"worker_id"`
	// Attempt is the job attempt that produced the trajectory (1 first).
	Attempt int64 `json:"attempt" arrow:"attempt"`
	// SystemPrompt, TaskPrompt and ToolsJSON (the OpenAI tool specs) are
	// what the episode started from, so that the learner can rebuild the
	// conversation for training without the worker's code.
	SystemPrompt string `json:"system_prompt" arrow:"system_prompt"`
	TaskPrompt   string `json:"task_prompt" arrow:"task_prompt"`
	ToolsJSON    string `json:"tools_json" arrow:"tools_json"`
	Turns        []Turn `json:"turns" arrow:"-"`
}

// Turn is one assistant step and the tool call it made.
type Turn struct {
	Index            int64  `json:"index" arrow:"turn"`
	AssistantContent string `json:"assistant_content" arrow:"assistant_content"`
	ToolName         string `json:"tool_name" arrow:"tool_name"`
	// ToolArgs is canonical JSON (sorted keys); ActionKey is tool name plus
	// ToolArgs, the identity of the action for history grouping.
	ToolArgs         string    `json:"tool_args" arrow:"tool_args"`
	ActionKey        string    `json:"action_key" arrow:"action_key"`
	Observation      string    `json:"observation" arrow:"observation"`
	Surfaced         Locations `json:"surfaced" arrow:"surfaced"`
	ObservationChars int64     `json:"observation_chars" arrow:"observation_chars"`
	PromptTokens     int64     `json:"prompt_tokens" arrow:"turn_prompt_tokens"`
	CompletionTokens int64     `json:"completion_tokens" arrow:"turn_completion_tokens"`
	PolicyLatencyMS  float64   `json:"policy_latency_ms" arrow:"policy_latency_ms"`
	ToolLatencyMS    float64   `json:"tool_latency_ms" arrow:"tool_latency_ms"`
	// TokenIDs and Logprobs are the completion's tokens when the policy
	// server returns them; nil otherwise.
	TokenIDs []int32   `json:"token_ids,omitempty" arrow:"token_ids"`
	Logprobs []float32 `json:"logprobs,omitempty" arrow:"logprobs"`
}

// Message is one chat message of a training example.
type Message struct {
	Role    string `json:"role" arrow:"role"`
	Content string `json:"content" arrow:"content"`
	// ToolCalls is the OpenAI tool_calls array as JSON, "" when none.
	ToolCalls  string `json:"tool_calls,omitempty" arrow:"tool_calls"`
	ToolCallID string `json:"tool_call_id,omitempty" arrow:"tool_call_id"`
	Name       string `json:"name,omitempty" arrow:"name"`
}

// LevelStats holds one number per location level.
type LevelStats struct {
	File   float64 `json:"file" arrow:"file"`
	Module float64 `json:"module" arrow:"module"`
	Entity float64 `json:"entity" arrow:"entity"`
}

// ShardRow is one trajectory kept for training, with per-assistant-turn
// weights for an advantage-weighted trainer.
type ShardRow struct {
	JobID      string    `json:"job_id" arrow:"job_id"`
	RunID      string    `json:"run_id" arrow:"run_id"`
	Iteration  int64     `json:"iteration" arrow:"iteration"`
	InstanceID string    `json:"instance_id" arrow:"instance_id"`
	Sample     int64     `json:"sample" arrow:"sample"`
	Messages   []Message `json:"messages" arrow:"messages"`
	// Tools is the tool schema list (OpenAI format) as JSON.
	Tools      string     `json:"tools" arrow:"tools"`
	Weights    []float64  `json:"weights" arrow:"weights"`
	Advantages []float64  `json:"advantages" arrow:"advantages"`
	Returns    []float64  `json:"returns" arrow:"returns"`
	Rewards    []float64  `json:"rewards" arrow:"rewards"`
	F1         LevelStats `json:"f1" arrow:"f1"`
	DC         LevelStats `json:"dc" arrow:"dc"`
	// InputIDs and LossWeights are set when shards are pre-tokenised.
	InputIDs    []int32   `json:"input_ids,omitempty" arrow:"input_ids"`
	LossWeights []float32 `json:"loss_weights,omitempty" arrow:"loss_weights"`
}

// LocOutput is one row of loc_outputs.jsonl: the parsed answer of one
// sample of one instance.
type LocOutput struct {
	InstanceID string   `json:"instance_id"`
	Sample     int64    `json:"sample"`
	Files      []string `json:"found_files"`
	Modules    []string `json:"found_modules"`
	Entities   []string `json:"found_entities"`
	RawOutput  string   `json:"raw_output"`
}

// RunManifest is stored in the runs bucket for each run iteration: what
// the run asked for, so that workers, the learner and status agree on it.
type RunManifest struct {
	RunID     string               `json:"run_id"`
	Iteration int64                `json:"iteration"`
	Samples   int                  `json:"samples"`
	Instances []string             `json:"instances"`
	Expected  int                  `json:"expected_jobs"`
	Gold      map[string]Locations `json:"gold"`
	Policy    Policy               `json:"policy"`
	Sampling  Sampling             `json:"sampling"`
	Limits    Limits               `json:"limits"`
	Created   time.Time            `json:"created"`
}
