package agent

import (
	"fmt"
	"strings"
)

// systemPrompt is the generic system message (written for a2farm; the
// reference's is a similarly short "helpful assistant" prompt).
const systemPrompt = `You are a careful software engineer who explores code repositories with the tools you are given. You cannot run code or change files; you only read. When a path is mentioned by the user, resolve it relative to the repository root, not to any working directory.`

// taskPrompt keeps the parts of the reference task users depend on: the
// goal, the steps, the id format and the answer format.
func taskPrompt(pkg string) string {
	return fmt.Sprintf(`Find where the code of the %[1]s repository must change to resolve the issue below. You only localize; you do not write the fix.

Work in steps:
1. Read the issue. Note the error messages, names, modules and behaviours it mentions that relate to %[1]s.
2. Locate those modules, classes and functions in the repository. Refer to code by id: file_path:QualifiedName (e.g. pkg/core.py:Parser.parse_header), or a file path.
3. Follow how the problem arises: who calls what, which code produces the behaviour.
4. Decide which functions, methods and classes need changes, including the code they depend on.

Tools: search_code_snippets finds code by names, keywords or line numbers; get_entity_contents shows the full code of ids; explore_tree_structure walks the dependency graph (contains, imports, invokes, inherits) from ids; search_commit searches the history; view_summary and search_summary describe files. Call finish with your answer when done.

Answer format: a fenced code block listing about five files, most important first. Under each file path, list what to change with "class:", "function:" (use Class.method for methods) or "line:" lines; separate files with a blank line:
`+"```"+`
pkg/core/parser.py
class: Parser
function: Parser.parse_header
line: 88

pkg/util/text.py
function: normalize
`+"```", pkg)
}

// guardRails are three fixed lines of the reference task.
const guardRails = `IMPORTANT: never ask for human help; do not use lambda functions in tool arguments; do not modify any file.`

// strategyHints vary the opening move by sample index (mod 5), so that
// samples of one issue explore differently.
var strategyHints = [...]string{
	"",
	"Hint: start by looking at the repository layout with explore_tree_structure.",
	"Hint: start with search_commit to see how similar problems were fixed.",
	"Hint: start by reading the most relevant code with get_entity_contents.",
	"Hint: start with a broad search_code_snippets, then follow dependencies with explore_tree_structure.",
}

// problemBlock wraps the issue text: first line as title, the rest below.
func problemBlock(statement string) string {
	title, body, _ := strings.Cut(strings.TrimSpace(statement), "\n")
	return "--- BEGIN PROBLEM STATEMENT ---\nTitle: " + strings.TrimSpace(title) + "\n\n" + strings.TrimSpace(body) + "\n--- END PROBLEM STATEMENT ---"
}

// userPrompt assembles the first user message.
func userPrompt(pkg, statement string, sample int64) string {
	parts := []string{taskPrompt(pkg), problemBlock(statement), guardRails}
	if hint := strategyHints[int(sample)%len(strategyHints)]; hint != "" {
		parts = append(parts, hint)
	}
	return strings.Join(parts, "\n\n")
}

// keepGoing answers a reply that neither called a tool nor answered.
const keepGoing = "Please continue: verify your findings with the tools if needed, and call finish with the answer in the required format when you are done."

// lastCall is sent once the tool budget is spent.
const lastCall = "You have used all tool calls. Give your final answer now in the required format and call finish."

// ProblemStatement extracts the issue text from a first user message.
func ProblemStatement(userMsg string) string {
	_, rest, ok := strings.Cut(userMsg, "--- BEGIN PROBLEM STATEMENT ---\n")
	if !ok {
		return userMsg
	}
	body, _, _ := strings.Cut(rest, "\n--- END PROBLEM STATEMENT ---")
	return strings.TrimPrefix(body, "Title: ")
}
