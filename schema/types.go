package schema

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Instance is one dataset row (SWE-bench style).
type Instance struct {
	InstanceID       string `json:"instance_id" arrow:"instance_id"`
	Repo             string `json:"repo" arrow:"repo"`
	BaseCommit       string `json:"base_commit" arrow:"base_commit"`
	ProblemStatement string `json:"problem_statement" arrow:"problem_statement"`
	Patch            string `json:"patch" arrow:"patch"`
	// BasePatch, when set, makes the snapshot BaseCommit with this patch
	// applied (a SWE-smith row: the patch that introduces the bug), written
	// as a commit of its own where it is read (gitrepo.Repo.Patched).
	BasePatch string `json:"base_patch,omitempty" arrow:"base_patch"`
	// Languages name the languages the instance's snapshot is read with
	// (lang.Selection: the run's --languages, else the row's own, else
	// Python); empty means every language the reader knows.
	Languages []string `json:"languages,omitempty" arrow:"languages"`
	// Extra holds the row's other fields (hints, tests, version...) as a
	// JSON object, kept so that nothing a user supplied is lost.
	Extra json.RawMessage `json:"-" arrow:"extra_json"`
}

// PackageName is the prefix of the instance id before its first "_", which
// the agent prompt uses as the package name, as the reference does
// ("psf__requests-2317" → "psf"). SWE-bench Pro ids put "instance_" before
// such an id ("instance_ansible__ansible-…"); it is skipped, so the package
// is "ansible" rather than "instance".
func (in Instance) PackageName() string {
	id := strings.TrimPrefix(in.InstanceID, "instance_")
	if before, _, found := strings.Cut(id, "_"); found {
		return before
	}
	return id
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

// Status is how a rollout ended.
type Status string

// Statuses of a finished rollout.
const (
	StatusOK          Status = "ok"
	StatusTruncated   Status = "truncated"
	StatusPolicyError Status = "policy_error"
	StatusToolError   Status = "tool_error"
	StatusInfraError  Status = "infra_error"
	StatusTimeout     Status = "timeout"
)

// PlayedOut reports whether a rollout ended by the policy's own course —
// it answered (ok) or used up its tool calls (truncated) — so that its
// rewards say something of the policy. The others end for reasons outside
// the policy's choices: a policy server refusing or garbling a request
// (policy_error), a tool or the farm failing (tool_error, infra_error),
// the episode's wall clock (timeout); the learner leaves them out of every
// group statistic.
func (s Status) PlayedOut() bool { return s == StatusOK || s == StatusTruncated }

// PolicyKind says what kind of policy acts; a worker's registry maps each
// kind to the code that plays it.
type PolicyKind string

// Policy kinds a job may name.
const (
	// PolicyHeuristic is the built-in deterministic policy.
	PolicyHeuristic PolicyKind = "heuristic"
	// PolicyOpenAI is a model behind an OpenAI-compatible server (vLLM).
	PolicyOpenAI PolicyKind = "openai"
	// PolicyReplay re-sends recorded replies, to reproduce episodes.
	PolicyReplay PolicyKind = "replay"
)

// Policy names what acts in an episode. It travels in the job: the run
// decides it, and a worker only knows where models are served.
type Policy struct {
	Kind PolicyKind `json:"kind" arrow:"kind"`
	// Model is the model or LoRA adapter name sent to the policy server.
	Model string `json:"model,omitempty" arrow:"model"`
	// Endpoint is where the episode was served (set by the worker, without
	// credentials); empty in a job.
	Endpoint string `json:"endpoint,omitempty" arrow:"endpoint"`
	// Version tags the checkpoint, e.g. "iter1".
	Version string `json:"version,omitempty" arrow:"version"`
	// TextMode describes the tools in the system message and parses
	// <function=...> calls, for servers without a tool parser.
	TextMode bool `json:"text_mode,omitempty" arrow:"text_mode"`
	// ReturnTokenIDs asks the server for the prompt and completion token
	// ids of every turn (vLLM and SGLang: "return_token_ids": true).
	ReturnTokenIDs bool `json:"return_token_ids,omitempty" arrow:"return_token_ids"`
	// Logprobs asks for the completion tokens' log-probabilities.
	Logprobs bool `json:"logprobs,omitempty" arrow:"logprobs"`
	// Adapter is where the replicas read the LoRA adapter Model names
	// (a path on their storage), set when Model is an adapter loaded at run
	// time: a replica that answers "does not exist" for Model (it restarted
	// and forgot it) gets it loaded again from there. Jobs only: the
	// trajectory records Model and Version.
	Adapter string `json:"adapter,omitempty" arrow:"-"`
}

// Sampling holds the decoding parameters sent to the policy server. Zero
// TopP, TopK, RepetitionPenalty and MaxTokens are not sent.
type Sampling struct {
	Temperature       float64 `json:"temperature" arrow:"temperature"`
	TopP              float64 `json:"top_p" arrow:"top_p"`
	TopK              int64   `json:"top_k" arrow:"top_k"`
	RepetitionPenalty float64 `json:"repetition_penalty" arrow:"repetition_penalty"`
	MaxTokens         int64   `json:"max_tokens" arrow:"max_tokens"`
	// Seed is this sample's seed (SampleSeed of the run seed); turn t of
	// the episode is sent seed Seed+t.
	Seed int64 `json:"seed" arrow:"seed"`
}

// SampleSeed derives the seed of one sample from the run's seed, so that
// samples differ yet a run is reproducible; consecutive turns add 0, 1, 2...
func SampleSeed(runSeed, sample int64) int64 { return runSeed*1_000_003 + sample*1009 }

// RunSeed inverts SampleSeed: the run seed a sample's seed came from.
func RunSeed(sampleSeed, sample int64) int64 { return (sampleSeed - sample*1009) / 1_000_003 }

// Limits bound one episode.
type Limits struct {
	MaxToolCalls     int64 `json:"max_tool_calls" arrow:"max_tool_calls"`
	MaxContextTokens int64 `json:"max_context_tokens" arrow:"max_context_tokens"`
	WallTimeSeconds  int64 `json:"wall_time_seconds" arrow:"wall_time_seconds"`
}

// Job is one rollout to run: an instance, a sample index and everything
// needed to reproduce the episode.
type Job struct {
	JobID            string `json:"job_id" arrow:"job_id"`
	RunID            string `json:"run_id" arrow:"run_id"`
	Iteration        int64  `json:"iteration" arrow:"iteration"`
	InstanceID       string `json:"instance_id" arrow:"instance_id"`
	Repo             string `json:"repo" arrow:"repo"`
	BaseCommit       string `json:"base_commit" arrow:"base_commit"`
	ProblemStatement string `json:"problem_statement" arrow:"problem_statement"`
	// BasePatch is the instance's (Instance.BasePatch): the snapshot is
	// BaseCommit with it applied.
	BasePatch string `json:"base_patch,omitempty" arrow:"base_patch"`
	// Languages are the instance's (Instance.Languages): the worker reads
	// the snapshot with them.
	Languages []string `json:"languages,omitempty" arrow:"languages"`
	Sample    int64    `json:"sample" arrow:"sample"`
	Policy    Policy   `json:"policy" arrow:"policy"`
	Sampling  Sampling `json:"sampling" arrow:"sampling"`
	Limits    Limits   `json:"limits" arrow:"limits"`
	Tools     []string `json:"tools" arrow:"tools"`
	Attempt   int64    `json:"attempt" arrow:"attempt"`
	// Handoffs counts the workers that could not serve the job's policy
	// and passed it on to one that can.
	Handoffs int64 `json:"handoffs,omitempty" arrow:"handoffs"`
	// OutageSince is when the job's model stopped answering, carried by a
	// job queued afresh during that outage so that its outage budget
	// counts from there; Outages counts those requeues.
	OutageSince time.Time `json:"outage_since,omitzero" arrow:"outage_since"`
	Outages     int64     `json:"outages,omitempty" arrow:"outages"`
	// Fork makes the job a branch of an earlier rollout of its instance;
	// the zero Fork is a base sample.
	Fork Fork `json:"fork,omitzero" arrow:"fork"`
}

// Fork makes a job a branch: it replays the first Turn turns of its
// parent's recorded trajectory (requests rebuilt and checked against the
// record, replies and tool observations taken from it, no tool run
// again) and samples fresh from turn Turn with its own seed. Those first
// Turn turns stay the parent's: the learner trains and counts them once,
// in the parent.
type Fork struct {
	ParentJobID  string `json:"parent_job_id" arrow:"parent_job_id"`
	ParentSample int64  `json:"parent_sample" arrow:"parent_sample"`
	// Turn is the first turn the branch samples itself (at least 1).
	Turn int64 `json:"turn" arrow:"turn"`
	// Branch numbers the branches of one parent at one turn, from 0.
	Branch int64 `json:"branch" arrow:"branch"`
	// LogSeq is where the parent's trajectory sits in the farm's
	// trajectory log (its stream sequence), which a worker reads the
	// prefix from; 0 outside a farm.
	LogSeq int64 `json:"log_seq,omitempty" arrow:"log_seq"`
}

// IsBranch reports whether the fork names a parent.
func (f Fork) IsBranch() bool { return f.ParentJobID != "" }

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
	Status     Status `json:"status" arrow:"status"`
	Error      string `json:"error,omitempty" arrow:"error"`
	// FinalAnswer is the raw text of the agent's answer; Predictions is
	// what it parsed to.
	FinalAnswer      string    `json:"final_answer" arrow:"final_answer"`
	Predictions      Locations `json:"predictions" arrow:"predictions"`
	StartedAt        time.Time `json:"started_at" arrow:"started_at"`
	FinishedAt       time.Time `json:"finished_at" arrow:"finished_at"`
	PromptTokens     int64     `json:"prompt_tokens" arrow:"prompt_tokens"`
	CompletionTokens int64     `json:"completion_tokens" arrow:"completion_tokens"`
	// Policy and Sampling are what produced the trajectory: the job's,
	// with the serving endpoint filled in by the worker.
	Policy   Policy   `json:"policy" arrow:"policy"`
	Sampling Sampling `json:"sampling" arrow:"sampling"`
	WorkerID string   `json:"worker_id" arrow:"worker_id"`
	// Attempt is the job attempt that produced the trajectory (1 first).
	Attempt int64 `json:"attempt" arrow:"attempt"`
	// ToolsJSON is the tool specs (OpenAI format) the episode offered; the
	// requests carried them unless the policy ran in text mode.
	ToolsJSON string `json:"tools_json" arrow:"tools_json"`
	// Fork is the job's: a branch's first Fork.Turn turns are its
	// parent's, copied verbatim.
	Fork  Fork   `json:"fork,omitzero" arrow:"fork"`
	Turns []Turn `json:"turns" arrow:"-"`
}

// OwnTurns is the index of the first turn the trajectory played itself:
// 0 for a base sample, the fork turn for a branch.
func (tr Trajectory) OwnTurns() int { return min(int(tr.Fork.Turn), len(tr.Turns)) }

// Turn is one assistant step: the request the policy server received,
// what it answered, and the tool calls that were executed.
type Turn struct {
	Index int64 `json:"index" arrow:"turn"`
	// RequestKeep and RequestAdded are the messages of this turn's request
	// as a delta: the first RequestKeep messages of the previous turn's
	// request followed by its reply (see Response), then RequestAdded.
	// Turn 0 keeps nothing. Trajectory.Requests rebuilds them.
	RequestKeep  int64     `json:"request_keep" arrow:"request_keep"`
	RequestAdded []Message `json:"request_added" arrow:"request_added"`
	// AssistantContent, Reasoning and ToolCalls are the reply exactly as
	// the server returned it (tool-call ids and argument strings
	// verbatim); it is sent back as is in the following requests.
	AssistantContent string     `json:"assistant_content" arrow:"assistant_content"`
	Reasoning        string     `json:"reasoning_content,omitempty" arrow:"reasoning_content"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty" arrow:"tool_calls"`
	FinishReason     string     `json:"finish_reason,omitempty" arrow:"finish_reason"`
	// ToolName and ToolArgs are the turn's first executed call (native or
	// parsed from text); ToolArgs is canonical JSON (sorted keys).
	// ActionKey is tool name plus ToolArgs, the identity of the action for
	// history grouping.
	ToolName         string    `json:"tool_name" arrow:"tool_name"`
	ToolArgs         string    `json:"tool_args" arrow:"tool_args"`
	ActionKey        string    `json:"action_key" arrow:"action_key"`
	Observation      string    `json:"observation" arrow:"observation"`
	Surfaced         Locations `json:"surfaced" arrow:"surfaced"`
	ObservationChars int64     `json:"observation_chars" arrow:"observation_chars"`
	// ObservationParts are the byte lengths of the executed calls'
	// observations, which Observation joins with a blank line: with them
	// a branch rebuilds each call's message exactly.
	ObservationParts []int64 `json:"observation_parts,omitempty" arrow:"observation_parts"`
	PromptTokens     int64   `json:"prompt_tokens" arrow:"turn_prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens" arrow:"turn_completion_tokens"`
	PolicyLatencyMS  float64 `json:"policy_latency_ms" arrow:"policy_latency_ms"`
	ToolLatencyMS    float64 `json:"tool_latency_ms" arrow:"tool_latency_ms"`
	// Replica names the policy server that answered the turn (its URL
	// without credentials) when the model has several: an episode keeps
	// to one, and moves only when it fails.
	Replica string `json:"replica,omitempty" arrow:"replica"`
	// PromptTokenKeep and PromptTokenIDs are the request's token ids as
	// the server returned them (with return_token_ids), as a delta: the
	// first PromptTokenKeep ids of the previous turn's prompt and
	// completion ids, then PromptTokenIDs (nil when the server returned
	// none). Trajectory.PromptIDs rebuilds them. TokenIDs are the
	// completion's ids and Logprobs their log-probabilities.
	PromptTokenKeep int64     `json:"prompt_token_keep,omitempty" arrow:"prompt_token_keep"`
	PromptTokenIDs  []int32   `json:"prompt_token_ids,omitempty" arrow:"prompt_token_ids"`
	TokenIDs        []int32   `json:"token_ids,omitempty" arrow:"token_ids"`
	Logprobs        []float32 `json:"logprobs,omitempty" arrow:"logprobs"`
}

// Response is the turn's reply as an assistant message.
func (t Turn) Response() Message {
	return Message{Role: "assistant", Content: t.AssistantContent, Reasoning: t.Reasoning, ToolCalls: t.ToolCalls}
}

// Message is one chat message, in the shape chat templates take.
type Message struct {
	Role    string `json:"role" arrow:"role"`
	Content string `json:"content" arrow:"content"`
	// Reasoning is the reasoning text a server returned beside the
	// content (vLLM's reasoning parsers), sent back as it came.
	Reasoning  string     `json:"reasoning_content,omitempty" arrow:"reasoning_content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty" arrow:"tool_calls"`
	ToolCallID string     `json:"tool_call_id,omitempty" arrow:"tool_call_id"`
	Name       string     `json:"name,omitempty" arrow:"name"`
}

// ToolCall is a function call requested by the model.
type ToolCall struct {
	ID       string       `json:"id" arrow:"id"`
	Type     string       `json:"type" arrow:"type"`
	Function FunctionCall `json:"function" arrow:"function"`
}

// FunctionCall names the function and carries its arguments as the JSON
// text the model wrote.
type FunctionCall struct {
	Name      string `json:"name" arrow:"name"`
	Arguments string `json:"arguments" arrow:"arguments"`
}

// ToolSpec is one tool offered to the model, in the OpenAI format.
type ToolSpec struct {
	Type     string       `json:"type" arrow:"type"`
	Function ToolFunction `json:"function" arrow:"function"`
}

// ToolFunction describes a tool. Parameters is its JSON schema, kept as
// JSON text: schemas differ per tool and cannot share one column type.
type ToolFunction struct {
	Name        string          `json:"name" arrow:"name"`
	Description string          `json:"description" arrow:"description"`
	Parameters  json.RawMessage `json:"parameters" arrow:"parameters"`
}

// LevelStats holds one number per location level.
type LevelStats struct {
	File   float64 `json:"file" arrow:"file"`
	Module float64 `json:"module" arrow:"module"`
	Entity float64 `json:"entity" arrow:"entity"`
}

// ShardRow is one training conversation: turns FirstTurn..LastTurn of a
// trajectory kept for training. For every assistant message of Messages
// the messages before it are exactly the request that produced it, so a
// trajectory whose context was trimmed (later requests no longer extend
// earlier ones) gives one row per stretch of turns that do.
type ShardRow struct {
	Span `arrow:",inline"`
	// Messages end with the reply of LastTurn.
	Messages []Message `json:"messages" arrow:"messages"`
	// Tools are the tool specs the requests carried (empty in text mode,
	// where the system message describes them).
	Tools []ToolSpec `json:"tools" arrow:"tools"`
	// Turns, Weights, Advantages, Returns and Rewards have one entry per
	// assistant message of Messages, in order: the turn it is, and that
	// turn's values. An assistant message before FirstTurn (context kept
	// from an earlier row after a trim) has weight 0 here: it is trained
	// in the row that ends with it.
	Turns      []int64    `json:"turns" arrow:"turns"`
	Weights    []float64  `json:"weights" arrow:"weights"`
	Advantages []float64  `json:"advantages" arrow:"advantages"`
	Returns    []float64  `json:"returns" arrow:"returns"`
	Rewards    []float64  `json:"rewards" arrow:"rewards"`
	F1         LevelStats `json:"f1" arrow:"f1"`
	DC         LevelStats `json:"dc" arrow:"dc"`
}

// TokenRow is one training sequence in token ids, as the policy server
// tokenized it: a turn's prompt ids, its completion ids, and for each
// following turn whose prompt extends that, the new prompt ids and its
// completion. LossWeights has one entry per id: the turn's weight on its
// completion ids, 0 on every other id. Logprobs, when the server returned
// any (the policy's logprobs), has one entry per id too: the acting
// policy's log-probability of each completion id, NaN where it is not
// known (prompt ids, a turn the server returned none for) — what a
// truncated importance weight divides by.
type TokenRow struct {
	Span        `arrow:",inline"`
	InputIDs    []int32   `json:"input_ids" arrow:"input_ids"`
	LossWeights []float32 `json:"loss_weights" arrow:"loss_weights"`
	Logprobs    []float32 `json:"logprobs,omitempty" arrow:"logprobs"`
}

// Span names the turns of one trajectory that a training row holds.
type Span struct {
	JobID      string `json:"job_id" arrow:"job_id"`
	RunID      string `json:"run_id" arrow:"run_id"`
	Iteration  int64  `json:"iteration" arrow:"iteration"`
	InstanceID string `json:"instance_id" arrow:"instance_id"`
	Sample     int64  `json:"sample" arrow:"sample"`
	FirstTurn  int64  `json:"first_turn" arrow:"first_turn"`
	LastTurn   int64  `json:"last_turn" arrow:"last_turn"`
	// PolicyVersion is the version of the policy that played the turns (the
	// trajectory's Policy.Version: "base", "it3"), so that a row's staleness
	// is known wherever it is trained.
	PolicyVersion string `json:"policy_version" arrow:"policy_version"`
}

// Span is the span of turns first..last of the trajectory.
func (tr Trajectory) Span(first, last int64) Span {
	return Span{JobID: tr.JobID, RunID: tr.RunID, Iteration: tr.Iteration, InstanceID: tr.InstanceID, Sample: tr.Sample,
		FirstTurn: first, LastTurn: last, PolicyVersion: tr.Policy.Version}
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

// LocOutput is the trajectory's parsed answer as a loc_outputs.jsonl row.
func (tr Trajectory) LocOutput() LocOutput {
	return LocOutput{InstanceID: tr.InstanceID, Sample: tr.Sample, Files: tr.Predictions.Files,
		Modules: tr.Predictions.Modules, Entities: tr.Predictions.Entities, RawOutput: tr.FinalAnswer}
}

// RunManifest is stored in the runs bucket for each run iteration: what
// the run asked for, so that workers, the learner and status agree on it.
type RunManifest struct {
	RunID     string   `json:"run_id"`
	Iteration int64    `json:"iteration"`
	Samples   int      `json:"samples"`
	Instances []string `json:"instances"`
	Expected  int      `json:"expected_jobs"`
	Spec      RunSpec  `json:"spec"`
	// Attempt is the run's current attempt: 1, and one more for each
	// explicit rerun.
	Attempt int64     `json:"attempt"`
	Created time.Time `json:"created"`
}

// RunSpec is what a run decides for every one of its jobs: what acts
// (policy and sampling), the limits of an episode, the tools offered and
// the run's seed, from which each sample's seed derives.
type RunSpec struct {
	Policy   Policy   `json:"policy"`
	Sampling Sampling `json:"sampling"`
	Limits   Limits   `json:"limits"`
	Tools    []string `json:"tools,omitempty"` // nil: every tool
	Seed     int64    `json:"seed"`
	// Branching forks an instance's base samples into branches once they
	// are all in (zero: no branches).
	Branching Branching `json:"branching,omitzero"`
}

// Branching says how a run forks its base samples: Branches
// continuations at each fork point, the fork points being fixed turns
// (ForkAt) or, without them, chosen where the history groups of depth
// Depth are thinnest, within Budget extra turns per instance (a share of
// the instance's base turns).
type Branching struct {
	Branches int64   `json:"branches"`
	ForkAt   []int64 `json:"fork_at,omitempty"`
	Budget   float64 `json:"budget,omitempty"`
	Depth    int64   `json:"depth,omitempty"`
}

// On reports whether the run forks at all.
func (b Branching) On() bool { return b.Branches > 0 }

// Validate reports a branching that cannot be planned.
func (b Branching) Validate() error {
	switch {
	case b.Branches < 0:
		return fmt.Errorf("branches must be >= 0, got %d", b.Branches)
	case !b.On():
		return nil
	case b.Budget < 0:
		return fmt.Errorf("the branch budget must be >= 0, got %g", b.Budget)
	case len(b.ForkAt) == 0 && b.Depth < 1:
		return fmt.Errorf("automatic fork points need a history depth >= 1, got %d", b.Depth)
	}
	for _, t := range b.ForkAt {
		if t < 1 {
			return fmt.Errorf("fork turns must be >= 1 (turn 0 is an independent sample), got %d", t)
		}
	}
	return nil
}

// Job plans one rollout of the run: sample `sample` of instance in.
func (s RunSpec) Job(runID string, iteration int64, in Instance, sample int64) Job {
	sampling := s.Sampling
	sampling.Seed = SampleSeed(s.Seed, sample)
	return Job{
		JobID: JobID(runID, iteration, in.InstanceID, sample), RunID: runID, Iteration: iteration,
		InstanceID: in.InstanceID, Repo: in.Repo, BaseCommit: in.BaseCommit, BasePatch: in.BasePatch, ProblemStatement: in.ProblemStatement,
		Languages: in.Languages, Sample: sample, Policy: s.Policy, Sampling: sampling, Limits: s.Limits, Tools: s.Tools, Attempt: 1,
	}
}

// Branch plans a branch of the run: sample `sample` of instance in, forked
// as fork says, with the sample's own seed and otherwise the run's policy,
// sampling and limits, as its parent had.
func (s RunSpec) Branch(runID string, iteration int64, in Instance, sample int64, fork Fork) Job {
	j := s.Job(runID, iteration, in, sample)
	j.Fork = fork
	return j
}

// Trajectory starts the trajectory of j: its identity, the policy and
// sampling it was planned with, and its attempt (at least 1). Every
// trajectory, played or not, begins here.
func (j Job) Trajectory(status Status) Trajectory {
	return Trajectory{
		JobID: j.JobID, RunID: j.RunID, Iteration: j.Iteration, InstanceID: j.InstanceID, Repo: j.Repo,
		Sample: j.Sample, Status: status, Policy: j.Policy, Sampling: j.Sampling, Attempt: max(j.Attempt, 1),
		Fork: j.Fork,
	}
}

// Supersedes reports whether trajectory tr of a job replaces old, an
// earlier one of the same job: a later attempt (a retried dead letter, an
// explicit rerun) does, unless it failed for infrastructure reasons where
// old did not. The learner archives by this rule and the coordinator
// forks branches from the same trajectories.
func Supersedes(tr, old Trajectory) bool {
	return tr.Attempt > old.Attempt && (tr.Status != StatusInfraError || old.Status == StatusInfraError)
}

// InfraError is the trajectory of a job that could not be played (no
// index, no worker for its policy or snapshot, deliveries exhausted): no
// turns, and why in its error, so that its group can close and the
// archive says what happened.
func (j Job) InfraError(why string, at time.Time) Trajectory {
	tr := j.Trajectory(StatusInfraError)
	tr.Error, tr.FinishedAt = why, at
	return tr
}
