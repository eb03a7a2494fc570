package schema

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// scanJSONL calls fn with each non-empty line of r and its 1-based number.
func scanJSONL(r io.Reader, fn func(line int, data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := fn(line, sc.Bytes()); err != nil {
			return fmt.Errorf("line %d: %w", line, DescribeJSONLine(sc.Bytes(), err))
		}
	}
	return sc.Err()
}

// DescribeJSONLine says in words what encoding/json found wrong with one
// line of a JSON-lines file, whose rows are objects, without the decoder's
// internals: a line that does not start like one is "not a JSON object"
// with its first characters, a syntax error gives its column and the text
// around it, a value of the wrong kind names its field; other errors are
// returned as they are.
func DescribeJSONLine(line []byte, err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	trimmed := strings.TrimSpace(string(line))
	switch {
	case trimmed != "" && trimmed[0] != '{' && errors.As(err, &syntax):
		return fmt.Errorf("not a JSON object: the line starts with %q", clip(trimmed, 24))
	case errors.As(err, &syntax):
		at := int(syntax.Offset) // the column of the character the decoder stopped at
		from := max(0, at-12)
		return fmt.Errorf("invalid JSON at column %d, near `%s`", at, clip(string(line[from:min(len(line), at+12)]), 24))
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Errorf("%s: want %s, got %s %s", typ.Field, jsonKind(typ.Type.Kind().String()), article(typ.Value), typ.Value)
	case errors.As(err, &typ):
		return fmt.Errorf("invalid JSON: want %s, got %s %s", jsonKind(typ.Type.Kind().String()), article(typ.Value), typ.Value)
	}
	return err
}

// clip cuts s to n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// jsonKind names a Go kind as the JSON value it decodes from.
func jsonKind(kind string) string {
	switch kind {
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "a list"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	}
	return "a number"
}

func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}

// ReadGold reads gt_location.jsonl rows.
func ReadGold(r io.Reader) ([]Gold, error) {
	var out []Gold
	err := scanJSONL(r, func(_ int, data []byte) error {
		var g Gold
		if err := json.Unmarshal(data, &g); err != nil {
			return err
		}
		if g.InstanceID == "" {
			return fmt.Errorf("missing instance_id")
		}
		out = append(out, g)
		return nil
	})
	return out, err
}

// ReadLocOutputs reads loc_outputs.jsonl. Besides a2farm's one row per
// (instance, sample), it accepts the reference's layout, where each
// found_* field is a list of per-sample lists and the sample index is the
// position in it.
func ReadLocOutputs(r io.Reader) ([]LocOutput, error) {
	var out []LocOutput
	err := scanJSONL(r, func(_ int, data []byte) error {
		var row struct {
			InstanceID string          `json:"instance_id"`
			Sample     *int64          `json:"sample"`
			Files      json.RawMessage `json:"found_files"`
			Modules    json.RawMessage `json:"found_modules"`
			Entities   json.RawMessage `json:"found_entities"`
			RawOutput  json.RawMessage `json:"raw_output"`
		}
		if err := json.Unmarshal(data, &row); err != nil {
			return err
		}
		if row.InstanceID == "" {
			return fmt.Errorf("missing instance_id")
		}
		// A level left out (or null) is an empty prediction.
		decode := func(raw json.RawMessage, dst any) error {
			if len(raw) == 0 || string(raw) == "null" {
				return nil
			}
			return json.Unmarshal(raw, dst)
		}
		var flat struct{ files, modules, entities []string }
		var nested struct{ files, modules, entities [][]string }
		if decode(row.Files, &flat.files) == nil && decode(row.Modules, &flat.modules) == nil &&
			decode(row.Entities, &flat.entities) == nil {
			lo := LocOutput{InstanceID: row.InstanceID, Files: flat.files, Modules: flat.modules, Entities: flat.entities}
			if row.Sample != nil {
				lo.Sample = *row.Sample
			}
			var raw string
			_ = json.Unmarshal(row.RawOutput, &raw)
			lo.RawOutput = raw
			out = append(out, lo)
			return nil
		}
		for _, f := range []struct {
			name string
			raw  json.RawMessage
			dst  *[][]string
		}{{"found_files", row.Files, &nested.files}, {"found_modules", row.Modules, &nested.modules}, {"found_entities", row.Entities, &nested.entities}} {
			if err := decode(f.raw, f.dst); err != nil {
				return fmt.Errorf("%s must be a list of ids or a list of per-sample lists of ids", f.name)
			}
		}
		n := max(len(nested.files), len(nested.modules), len(nested.entities))
		at := func(l [][]string, i int) []string {
			if i < len(l) {
				return l[i]
			}
			return nil
		}
		for i := range n {
			out = append(out, LocOutput{InstanceID: row.InstanceID, Sample: int64(i),
				Files: at(nested.files, i), Modules: at(nested.modules, i), Entities: at(nested.entities, i)})
		}
		return nil
	})
	return out, err
}
