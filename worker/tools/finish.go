package tools

import (
	"context"
	"encoding/json"
)

func finishTool() *Tool {
	return &Tool{
		Name:        Finish,
		Description: "Ends the task. Call it once you have localized the code to change (or cannot make further progress), passing your final answer: the fenced list of files, classes, functions and lines in the requested format.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string",` +
			`"description":"The final localization answer, in the requested format."}},"required":["answer"]}`),
		call: func(_ context.Context, _ *Set, args json.RawMessage) (Result, error) {
			var a struct {
				Answer *string `json:"answer"`
			}
			if err := decode(args, &a); err != nil {
				return Result{}, err
			}
			if a.Answer == nil {
				return Result{}, badArgs("`answer` is required.")
			}
			return Result{Finish: true, Answer: *a.Answer}, nil
		},
	}
}
