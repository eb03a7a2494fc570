package typescript

import (
	"encoding/json"
	"path"
	"slices"
	"strings"
)

// ReadsProjectFile asks for tsconfig.json and jsconfig.json files
// (outside the folders the language skips): their compilerOptions.paths
// and baseUrl map bare specifiers to the repository's files.
func (Language) ReadsProjectFile(p string) bool {
	base := path.Base(p)
	return (base == "tsconfig.json" || base == "jsconfig.json") && (Language{}).Reads(path.Join(path.Dir(p), "x.ts"))
}

// tsconfig is what resolution needs of one config file: its folder, the
// base of non-relative specifiers and its path patterns, longest prefix
// first.
type tsconfig struct {
	dir, baseURL string
	paths        []pathPattern
	hasBase      bool
}

type pathPattern struct {
	pattern string
	targets []string
}

// tsconfigs reads every config file; those that do not parse are left out.
func tsconfigs(project map[string][]byte) map[string]*tsconfig {
	out := map[string]*tsconfig{}
	for p, data := range project {
		var raw struct {
			CompilerOptions struct {
				BaseURL *string             `json:"baseUrl"`
				Paths   map[string][]string `json:"paths"`
			} `json:"compilerOptions"`
		}
		if err := json.Unmarshal(jsonc(data), &raw); err != nil {
			continue
		}
		c := &tsconfig{dir: path.Dir(p)}
		c.baseURL = c.dir
		if b := raw.CompilerOptions.BaseURL; b != nil {
			c.baseURL, c.hasBase = path.Clean(path.Join(c.dir, *b)), true
		}
		for pattern, targets := range raw.CompilerOptions.Paths {
			c.paths = append(c.paths, pathPattern{pattern, targets})
		}
		// The longest prefix before a "*" wins, as in TypeScript.
		slices.SortFunc(c.paths, func(a, b pathPattern) int {
			return len(strings.SplitN(b.pattern, "*", 2)[0]) - len(strings.SplitN(a.pattern, "*", 2)[0])
		})
		// A tsconfig.json and a jsconfig.json in one folder: TypeScript's
		// own wins.
		if prev, ok := out[c.dir]; ok && path.Base(p) == "jsconfig.json" && prev != nil {
			continue
		}
		out[c.dir] = c
	}
	return out
}

// nearest is the config of the closest folder at or above dir.
func nearest(configs map[string]*tsconfig, dir string) *tsconfig {
	for {
		if c, ok := configs[dir]; ok {
			return c
		}
		if dir == "." || dir == "/" || dir == "" {
			return nil
		}
		dir = path.Dir(dir)
	}
}

// candidates are the paths a bare specifier may name under c: each
// matching pattern's targets with the wildcard substituted, then the
// specifier under baseUrl when one is set.
func (c *tsconfig) candidates(spec string) []string {
	var out []string
	for _, p := range c.paths {
		prefix, suffix, wild := strings.Cut(p.pattern, "*")
		var star string
		switch {
		case !wild && spec == p.pattern:
		case wild && strings.HasPrefix(spec, prefix) && strings.HasSuffix(spec, suffix) && len(spec) >= len(prefix)+len(suffix):
			star = spec[len(prefix) : len(spec)-len(suffix)]
		default:
			continue
		}
		for _, t := range p.targets {
			out = append(out, path.Clean(path.Join(c.baseURL, strings.Replace(t, "*", star, 1))))
		}
		break // the best pattern decides
	}
	if c.hasBase {
		out = append(out, path.Clean(path.Join(c.baseURL, spec)))
	}
	return out
}

// jsonc turns a tsconfig's JSON with comments and trailing commas into
// JSON.
func jsonc(data []byte) []byte {
	var out []byte
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case inString:
			out = append(out, c)
			if c == '\\' && i+1 < len(data) {
				i++
				out = append(out, data[i])
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
			out = append(out, c)
		case c == '/' && i+1 < len(data) && data[i+1] == '/':
			for i < len(data) && data[i] != '\n' {
				i++
			}
			out = append(out, '\n')
		case c == '/' && i+1 < len(data) && data[i+1] == '*':
			end := strings.Index(string(data[i+2:]), "*/")
			if end < 0 {
				return out
			}
			i += end + 3
		default:
			out = append(out, c)
		}
	}
	// Trailing commas before a closing bracket or brace.
	var clean []byte
	inString = false
	for i := 0; i < len(out); i++ {
		switch {
		case inString && out[i] == '\\' && i+1 < len(out):
			clean = append(clean, out[i], out[i+1])
			i++
			continue
		case out[i] == '"':
			inString = !inString
		}
		if !inString && out[i] == ',' {
			j := i + 1
			for j < len(out) && strings.ContainsRune(" \t\r\n", rune(out[j])) {
				j++
			}
			if j < len(out) && (out[j] == '}' || out[j] == ']') {
				continue
			}
		}
		clean = append(clean, out[i])
	}
	return clean
}
