package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag value for a size in bytes, written with an optional
// unit: 512MiB, 4GiB, 2GB, 1500000.
type byteSize int64

var byteUnits = []struct {
	suffix string
	factor float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

func (b *byteSize) String() string {
	v := int64(*b)
	for _, u := range []struct {
		suffix string
		factor int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v >= u.factor && v%u.factor == 0 {
			return strconv.FormatInt(v/u.factor, 10) + u.suffix
		}
	}
	return strconv.FormatInt(v, 10)
}

func (b *byteSize) Set(s string) error {
	text := strings.TrimSpace(s)
	factor := 1.0
	for _, u := range byteUnits {
		if num, ok := strings.CutSuffix(text, u.suffix); ok {
			text, factor = strings.TrimSpace(num), u.factor
			break
		}
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil || v < 0 {
		return fmt.Errorf("%q is not a size: write bytes, or a number with KiB, MiB, GiB, KB, MB or GB", s)
	}
	*b = byteSize(v * factor)
	return nil
}

func (b *byteSize) Type() string { return "size" }
