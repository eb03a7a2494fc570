package codesearch

import (
	"fmt"
	"sync"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/custom"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/analysis/token/lowercase"
	"github.com/blevesearch/bleve/v2/analysis/tokenizer/regexp"
	"github.com/blevesearch/bleve/v2/mapping"
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
	if err := im.AddCustomTokenizer("a2farm_words", map[string]any{"type": regexp.Name, "regexp": `\w\w+`}); err != nil {
		return nil, err
	}
	if err := im.AddCustomAnalyzer(AnalyzerName, map[string]any{
		"type":          custom.Name,
		"tokenizer":     "a2farm_words",
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
