package codesearch

import (
	"math/rand/v2"
	"regexp"
	"testing"

	blevere "github.com/blevesearch/bleve/v2/analysis/tokenizer/regexp"
)

// referenceTokens is the rule approxTokens counts by hand: the matches of
// the reference splitter's pattern.
var referenceTokens = regexp.MustCompile(`\w+|[^\w\s]`)

// TestApproxTokensCountsThePatternsMatches: the hand-written counter
// agrees with the regular expression on code, Unicode, invalid UTF-8 and
// every kind of white space, including random strings over those.
func TestApproxTokensCountsThePatternsMatches(t *testing.T) {
	cases := []string{
		"", " ", "\t\n\r\f", "\v", "x", "__init__", "def f(a, b=2):\n    return a+b  # sum",
		"naïve café", "日本語 text", "\xff\xfe", "a\xffb", "é_x", "1.5e-3", "x\u00a0y", "→→",
	}
	alphabet := []string{"a", "Z", "_", "9", " ", "\t", "\n", "\r", "\f", "\v", "(", ".", "é", "日", "\xff", "\u00a0", "#"}
	for _, s := range append(cases, randomStrings(1, alphabet)...) {
		if got, want := approxTokens(s), len(referenceTokens.FindAllStringIndex(s, -1)); got != want {
			t.Errorf("approxTokens(%q) = %d, the pattern matches %d times", s, got, want)
		}
	}
}

// TestWordsTokenizerIsBlevesRegexpTokenizer: the hand-written tokenizer
// gives exactly the tokens (terms, offsets, positions, types) of bleve's
// regexp tokenizer with the pattern it replaced.
func TestWordsTokenizerIsBlevesRegexpTokenizer(t *testing.T) {
	want := blevere.NewRegexpTokenizer(regexp.MustCompile(`\w\w+`))
	cases := []string{"", "a", "ab", "def __init__(self, x1):", "inf nan 1e5 0x1F 1_000 10", "naïve日本ab\xffcd", "a b cc"}
	alphabet := []string{"a", "Z", "_", "9", "e", " ", "\n", "(", ".", "é", "日", "\xff", "inf", "1e3"}
	for _, s := range append(cases, randomStrings(2, alphabet)...) {
		got, exp := wordsTokenizer{}.Tokenize([]byte(s)), want.Tokenize([]byte(s))
		if len(got) != len(exp) {
			t.Fatalf("%q: %d tokens, bleve's regexp tokenizer gives %d", s, len(got), len(exp))
		}
		for i := range got {
			if got[i].String() != exp[i].String() {
				t.Fatalf("%q: token %d is %s, want %s", s, i, got[i], exp[i])
			}
		}
	}
}

// randomStrings makes 3,000 strings of up to 40 pieces of alphabet.
func randomStrings(seed uint64, alphabet []string) []string {
	rng := rand.New(rand.NewPCG(seed, seed))
	out := make([]string, 3000)
	for i := range out {
		var s []byte
		for range rng.IntN(40) {
			s = append(s, alphabet[rng.IntN(len(alphabet))]...)
		}
		out[i] = string(s)
	}
	return out
}
