// Package agent runs one localization episode: it builds the messages,
// asks the policy for actions, executes tools, trims the context, and
// turns the final answer into file, module and function predictions.
package agent
