package agent

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/a2farm/a2farm/schema"
)

var (
	functionOpen = regexp.MustCompile(`<function=([A-Za-z_][\w.-]*)>`)
	parameterTag = regexp.MustCompile(`(?s)<parameter=([A-Za-z_]\w*)>(.*?)(?:</parameter>|$)`)
)

// textCall is a tool call written in the text (CodeAct) syntax:
//
//	<function=NAME>
//	<parameter=P>value</parameter>
//	</function>
type textCall struct {
	name string
	args map[string]any
}

// parseTextCall reads the first <function=...> block of a reply. Values
// become JSON types by the tool's schema: integers, arrays (JSON, with
// single quotes accepted) or strings. ok is false when there is no call.
func parseTextCall(text string, schemaTypes func(tool, param string) string) (textCall, bool) {
	loc := functionOpen.FindStringSubmatchIndex(text)
	if loc == nil {
		return textCall{}, false
	}
	call := textCall{name: text[loc[2]:loc[3]], args: map[string]any{}}
	body := text[loc[1]:]
	if end := strings.Index(body, "</function"); end >= 0 {
		body = body[:end]
	}
	for _, m := range parameterTag.FindAllStringSubmatch(body, -1) {
		name, value := m[1], strings.TrimSpace(m[2])
		switch schemaTypes(call.name, name) {
		case "integer":
			if n, err := strconv.Atoi(value); err == nil {
				call.args[name] = n
				continue
			}
		case "array":
			var arr []any
			if json.Unmarshal([]byte(value), &arr) == nil {
				call.args[name] = arr
				continue
			}
			if json.Unmarshal([]byte(strings.ReplaceAll(value, "'", `"`)), &arr) == nil {
				call.args[name] = arr
				continue
			}
		}
		call.args[name] = value
	}
	return call, true
}

// TextToolInstructions describes the tools and the call syntax for servers
// without a native tool parser; it is appended to the system prompt when
// sending, never stored.
func TextToolInstructions(specs []schema.ToolSpec) string {
	var b strings.Builder
	b.WriteString("\n\nYou can call these functions:\n")
	for i, s := range specs {
		fn := s.Function
		b.WriteString("\n---- BEGIN FUNCTION #" + strconv.Itoa(i+1) + ": " + fn.Name + " ----\n" + strings.TrimSpace(fn.Description) + "\n")
		if len(fn.Parameters) > 0 {
			b.WriteString("Parameters (JSON schema): " + string(fn.Parameters) + "\n")
		}
		b.WriteString("---- END FUNCTION #" + strconv.Itoa(i+1) + " ----\n")
	}
	b.WriteString(`
To call a function, end your reply with exactly one block:
<function=NAME>
<parameter=PARAM>value</parameter>
</function>
Array values are JSON arrays. Call one function per reply.`)
	return b.String()
}
