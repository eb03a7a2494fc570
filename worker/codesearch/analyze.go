package codesearch

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/custom"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/analysis/token/lowercase"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/registry"
	index "github.com/blevesearch/bleve_index_api"
)

// AnalyzerName is the analyzer both search engines use: words of two or
// more word characters (underscores stay inside), lowercased, English stop
// words removed, Snowball English stems — the reference's BM25 tokens.
const AnalyzerName = "a2farm_code"

// searchMapping builds the bleve mapping with the a2farm analyzer as
// default and bm25 scoring.
func searchMapping() (*mapping.IndexMappingImpl, error) {
	im := bleve.NewIndexMapping()
	if err := im.AddCustomAnalyzer(AnalyzerName, map[string]any{
		"type":          custom.Name,
		"tokenizer":     wordsTokenizerName,
		"token_filters": []any{lowercase.Name, en.StopName, en.SnowballStemmerName},
	}); err != nil {
		return nil, err
	}
	im.DefaultAnalyzer = AnalyzerName
	im.ScoringModel = index.BM25Scoring
	doc := bleve.NewDocumentStaticMapping()
	text := bleve.NewTextFieldMapping()
	text.Analyzer = AnalyzerName
	text.Store = false
	text.IncludeTermVectors = false
	doc.AddFieldMappingsAt("text", text)
	im.DefaultMapping = doc
	return im, nil
}

// analyzer returns the shared analyzer (built once per process).
var analyzer = sync.OnceValues(func() (analysis.Analyzer, error) {
	im, err := searchMapping()
	if err != nil {
		return nil, err
	}
	a := im.AnalyzerNamed(AnalyzerName)
	if a == nil {
		return nil, fmt.Errorf("analyzer %s not registered", AnalyzerName)
	}
	return a, nil
})

// Tokens analyzes text into search terms.
func Tokens(text string) []string {
	a, err := analyzer()
	if err != nil {
		panic(err) // the mapping is static; failure is a programming error caught by tests
	}
	stream := a.Analyze([]byte(text))
	out := make([]string, 0, len(stream))
	for _, t := range stream {
		out = append(out, string(t.Term))
	}
	return out
}

// wordsTokenizerName names the tokenizer of the a2farm analyzer in bleve's
// registry of tokenizers (a library-wide table, filled once at start).
const wordsTokenizerName = "a2farm_words"

func init() {
	err := registry.RegisterTokenizer(wordsTokenizerName, func(map[string]any, *registry.Cache) (analysis.Tokenizer, error) {
		return wordsTokenizer{}, nil
	})
	if err != nil {
		panic(err)
	}
}

// wordsTokenizer yields the matches of `\w\w+` (ASCII word characters, as
// RE2 has them) with the positions and types bleve's regexp tokenizer gives
// them, scanned by hand: the regular expression was two thirds of
// indexing's analysis time.
type wordsTokenizer struct{}

func (wordsTokenizer) Tokenize(input []byte) analysis.TokenStream {
	var out analysis.TokenStream
	for i := 0; i < len(input); {
		if !isWordByte(input[i]) {
			i++
			continue
		}
		start := i
		for i < len(input) && isWordByte(input[i]) {
			i++
		}
		if i-start < 2 {
			continue
		}
		term := input[start:i]
		typ := analysis.AlphaNumeric
		if _, err := strconv.ParseFloat(string(term), 64); err == nil {
			typ = analysis.Numeric // "10", "1e5", also "inf" and "nan", as bleve's tokenizer has it
		}
		out = append(out, &analysis.Token{Term: term, Start: start, End: i, Position: len(out) + 1, Type: typ})
	}
	return out
}
